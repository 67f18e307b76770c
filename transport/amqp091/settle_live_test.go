package amqp091_test

import (
	"context"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/transport"
)

var (
	modified = messages.Outcome{Kind: messages.Modified, DeliveryFailed: true}
	released = messages.Outcome{Kind: messages.Released}
)

// settleCounts publishes one message to a fresh quorum queue and settles
// it with each of outcomes in turn, handing it back either at once or, with
// deferred, once the receiver has stopped taking deliveries (a drain: the
// message is given back by Close); it returns the delivery-count of each
// delivery, the last one accepted.
func settleCounts(t *testing.T, url string, deferred bool, outcomes ...messages.Outcome) []uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	q := address.Queue(unique("amqp091-settle"))
	newSide(t, url).deleteQueue(q.Name())
	c := connect(t, url)
	ps, err := c.NewSession(ctx)
	require.NoError(t, err)
	defer func() { _ = ps.Close(ctx) }()
	snd, err := ps.NewSender(ctx, transport.SenderOptions{Address: q})
	require.NoError(t, err)
	rc, err := snd.Send(ctx, &amqp.Message{Data: [][]byte{[]byte("x")}, Properties: &amqp.MessageProperties{MessageID: "m"}}, false)
	require.NoError(t, err)
	o, err := rc.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, messages.Accepted, o.Kind)

	var counts []uint32
	if !deferred {
		// One consumer throughout: the broker hands a message settled back
		// to the consumer that still has room, and a Close in between
		// would give it back once more (RabbitMQ 4.0 counts that too).
		s, err := c.NewSession(ctx)
		require.NoError(t, err)
		r, err := s.NewReceiver(ctx, transport.ReceiverOptions{Address: q, Credit: 1})
		require.NoError(t, err)
		for i := 0; i <= len(outcomes); i++ {
			require.NoError(t, r.IssueCredit(1))
			m, err := r.Receive(ctx)
			require.NoError(t, err)
			counts = append(counts, m.Header.DeliveryCount)
			o := messages.Outcome{Kind: messages.Accepted}
			if i < len(outcomes) {
				o = outcomes[i]
			}
			require.NoError(t, r.Settle(ctx, m, o), "settle %v", o.Kind)
		}
		require.NoError(t, r.Close(ctx))
		require.NoError(t, s.Close(ctx))
		return counts
	}
	for i := 0; i <= len(outcomes); i++ {
		s, err := c.NewSession(ctx)
		require.NoError(t, err)
		r, err := s.NewReceiver(ctx, transport.ReceiverOptions{Address: q, Credit: 1})
		require.NoError(t, err)
		require.NoError(t, r.IssueCredit(1))
		m, err := r.Receive(ctx)
		require.NoError(t, err)
		counts = append(counts, m.Header.DeliveryCount)
		o := messages.Outcome{Kind: messages.Accepted}
		if i < len(outcomes) {
			o = outcomes[i]
			// A Receive whose context has ended is how the runtime's pump
			// stops taking deliveries when a drain begins.
			gone, stop := context.WithCancel(ctx)
			stop()
			_, err := r.Receive(gone)
			require.ErrorIs(t, err, context.Canceled)
		}
		require.NoError(t, r.Settle(ctx, m, o), "settle %v", o.Kind)
		require.NoError(t, r.Close(ctx))
		require.NoError(t, s.Close(ctx))
	}
	return counts
}

// TestLiveSettleModifiedCounts: modified hands a message back counted in
// its delivery-count, which MaxDeliveries and dead-lettering read, on every
// release of RabbitMQ, whether settled at once or given back by Close
// during a drain. RabbitMQ 4.3 no longer counts a basic.nack with requeue,
// only basic.reject.
func TestLiveSettleModifiedCounts(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 settlement test")
	v := livetest.RabbitMQ(t, url)
	for _, deferred := range []bool{false, true} {
		counts := settleCounts(t, url, deferred, modified, modified)
		require.Equal(t, []uint32{0, 1, 2}, counts, "RabbitMQ %v, deferred=%v: delivery-count after each modified", v, deferred)
	}
}

// TestLiveSettleReleasedCounts: released hands a message back uncounted
// where the broker can (RabbitMQ 4.3 and later: basic.nack with requeue);
// RabbitMQ 4.0's quorum queues count every return over 0-9-1, so there the
// count goes up by one (this expectation holds for 4.0, checked on it).
func TestLiveSettleReleasedCounts(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 settlement test")
	v := livetest.RabbitMQ(t, url)
	want := []uint32{0, 1, 1, 2}
	if !v.AtLeast(4, 3) {
		want = []uint32{0, 1, 2, 3} // RabbitMQ 4.0
	}
	for _, deferred := range []bool{false, true} {
		counts := settleCounts(t, url, deferred, modified, released, modified)
		require.Equal(t, want, counts, "RabbitMQ %v, deferred=%v: delivery-count after modified, released, modified", v, deferred)
	}
}
