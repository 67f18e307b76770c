package receiver_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors/receiver"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
)

// A delivery a transaction claims is the transaction's: Find names its
// link and transfer while it is held, its handler's settle then only
// returns credit (nothing on the link), a cut drain does not release it,
// and a settled delivery cannot be found or claimed.
func TestClaimedDeliveryIsTheTransactions(t *testing.T) {
	link := &fakeLink{msgs: make(chan *amqp.Message, 3), done: make(chan struct{})}
	for _, b := range []string{"a", "b", "c"} {
		link.msgs <- amqp.NewMessage([]byte(b))
	}
	spec := &protocol.SubscriptionSpec{Address: address.Queue("q"), Credit: 8, Partitions: 1}
	got := make(chan *protocol.Delivery, 3)
	sys, env, pid := spawnReceiver(t, link, spec, func(d *protocol.Delivery) { got <- d })
	ds := map[string]*protocol.Delivery{}
	for range 3 {
		select {
		case d := <-got:
			ds[string(d.Raw.GetData())] = d
		case <-time.After(5 * time.Second):
			t.Fatal("the deliveries never reached the handler")
		}
	}
	a, b, c := ds["a"].Message, ds["b"].Message, ds["c"].Message

	_, err := receiver.Find(env, &messages.Message{})
	require.ErrorIs(t, err, receiver.ErrNotHeld, "a message no link holds")
	ha, err := receiver.Find(env, a)
	require.NoError(t, err)
	require.Same(t, link, ha.Link())
	require.Equal(t, "a", string(ha.Raw.GetData()))
	require.NoError(t, ha.Claim())
	require.ErrorIs(t, ha.Claim(), receiver.ErrNotHeld, "claimed twice")
	hc, err := receiver.Find(env, c)
	require.NoError(t, err)
	require.NoError(t, hc.Claim())

	ds["a"].Settle(messages.Outcome{Kind: messages.Modified, DeliveryFailed: true})
	ds["b"].Settle(messages.Outcome{Kind: messages.Accepted})
	require.Eventually(t, func() bool { return len(link.events()) == 1 }, 5*time.Second, time.Millisecond)
	require.Equal(t, []string{"settle b accepted"}, link.events(), "the claimed delivery's own settle stays off the link")
	_, err = receiver.Find(env, b)
	require.ErrorIs(t, err, receiver.ErrNotHeld, "a settled delivery")

	// A drain cut short releases what handlers hold, but not c: the
	// transaction settles it.
	hard, cancelHard := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelHard()
	grace, cancelGrace := context.WithTimeout(hard, 50*time.Millisecond)
	defer cancelGrace()
	done := make(chan error, 1)
	sys.Root.Send(pid, &protocol.Drain{Ctx: hard, Graceful: grace, Done: done})
	select {
	case <-done:
	case <-hard.Done():
		t.Fatal("the drain was not answered by its Ctx")
	}
	require.Equal(t, []string{"settle b accepted", "close"}, link.events())
	_, err = receiver.Find(env, c)
	require.ErrorIs(t, err, receiver.ErrNotHeld, "a delivery of a link that ended")
	require.NoError(t, sys.Root.PoisonFuture(pid).Wait())
	require.NoError(t, env.Wait(hard))
}
