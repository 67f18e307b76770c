package inproc

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport"
)

// churn sends, receives and accepts n messages of the same shape as the
// others on a queue of its own, so that whatever the broker recycles is
// reused.
func (e *env) churn(n int) {
	e.t.Helper()
	a := address.Queue("churn")
	r := e.sub(a, uint32(n))
	s := e.sender(a)
	for i := range n {
		e.send(s, "churn-"+strconv.Itoa(i))
		settle(e.t, r, recv(e.t, r), accept)
	}
	require.NoError(e.t, r.Close(context.Background()))
}

// TestRecycledCopyStaysWhileAnyEntryReadsIt: the broker's copy of a message
// goes back to its pool only once every queue it was routed to is done with
// it, so a fan-out whose other subscription accepted, a redelivery and a
// dead letter still read the message as published.
func TestRecycledCopyStaysWhileAnyEntryReadsIt(t *testing.T) {
	e := newEnv(t)
	top := address.Topic("recycle")
	ra := e.sub(top, 1)
	rb := e.receiver(transport.ReceiverOptions{Address: top, Subscription: "keep", Credit: 1}, 1)
	pub := e.sender(top)
	e.send(pub, "first")

	ma := recv(t, ra)
	settle(t, ra, ma, accept)
	e.churn(64)
	// A transport user may still read a delivery it settled.
	require.Equal(t, "first", string(ma.GetData()))

	mb := recv(t, rb)
	require.Equal(t, "first", string(mb.GetData()))
	settle(t, rb, mb, release)
	e.churn(64)
	require.NoError(t, rb.IssueCredit(1))
	mb = recv(t, rb)
	require.Equal(t, "first", string(mb.GetData()))
	require.False(t, mb.Header.FirstAcquirer)
	settle(t, rb, mb, rejected)
	e.churn(64)
	dead := e.b.DeadLetters("recycle::keep")
	require.Len(t, dead, 1)
	require.Equal(t, "first", string(dead[0].GetData()))
}

// TestPresettledDeliveryRecyclesTheCopy: a pre-settled receiver's delivery
// is its own after the broker's copy went back to its pool.
func TestPresettledDeliveryRecyclesTheCopy(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("presettled-recycle")
	r := e.receiver(transport.ReceiverOptions{Address: a, Settled: true, Credit: 8}, 8)
	e.send(e.sender(a), "mine")
	m := recv(t, r)
	e.churn(64)
	require.Equal(t, "mine", string(m.GetData()))
}

// TestPublisherMayReuseItsBufferAfterSend: the broker's copy is taken
// before Send returns, pooled or not.
func TestPublisherMayReuseItsBufferAfterSend(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("reuse-buffer")
	r := e.sub(a, 4)
	s := e.sender(a)
	body := []byte("one")
	_, err := s.Send(context.Background(), &amqp.Message{Data: [][]byte{body}}, false)
	require.NoError(t, err)
	copy(body, "two")
	_, err = s.Send(context.Background(), &amqp.Message{Data: [][]byte{body}}, false)
	require.NoError(t, err)
	require.Equal(t, "one", recvBody(t, r))
	require.Equal(t, "two", recvBody(t, r))
}

// TestRecyclingReceiverGetsCleanCopies: with RecycleSettled, Settle hands
// the delivered copy back to the broker, and a later delivery in the same
// memory carries nothing of the one before: every delivery is what the wire
// would deliver, whatever shape came before it.
func TestRecyclingReceiverGetsCleanCopies(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("recycling")
	r := e.receiver(transport.ReceiverOptions{Address: a, Credit: 64}, 64)
	r.(transport.Recycler).RecycleSettled()
	s := e.sender(a)
	subject, ct := "subj", "text/plain"
	shapes := []*amqp.Message{
		{Data: [][]byte{[]byte("a longer body than the next one")}, ApplicationProperties: map[string]any{"k": "v"},
			Annotations: amqp.Annotations{"x-opt-a": int64(1)}, Header: &amqp.MessageHeader{Durable: true, Priority: 7}},
		{Sequence: [][]any{{int64(1), "a"}}, DeliveryAnnotations: amqp.Annotations{"x-opt-d": "d"}},
		{Data: [][]byte{[]byte("short")}},
		{Data: [][]byte{[]byte("two"), []byte("sections")}, Properties: &amqp.MessageProperties{
			MessageID: "id", Subject: &subject, ContentType: &ct, UserID: []byte("u")}},
		{Data: [][]byte{[]byte("props gone")}, Footer: amqp.Annotations{"f": "x"}},
		{Properties: &amqp.MessageProperties{CorrelationID: uint64(9)}, Value: "value, no data"},
		{Data: [][]byte{{}}},
	}
	for round := range 3 {
		for i, m := range shapes {
			if round == 1 {
				m = shapes[len(shapes)-1-i]
			}
			_, err := s.Send(context.Background(), m, false)
			require.NoError(t, err)
			got := recv(t, r)
			require.Equal(t, viaWire(t, m, true, 0), got, "round %d shape %d", round, i)
			settle(t, r, got, accept)
		}
	}
}

// TestReceiveHoldsTheCopyItReads: a Receive copies the broker's message
// after it let go of its link's lock; a link that ends at that moment sends
// the entry back, and its acceptance on another link must not recycle the
// message under the copy.
func TestReceiveHoldsTheCopyItReads(t *testing.T) {
	paused, resume := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	testHookReceiveUnlocked = func() {
		if first.CompareAndSwap(false, true) {
			close(paused)
			<-resume
		}
	}
	t.Cleanup(func() { testHookReceiveUnlocked = nil })
	e := newEnv(t)
	a := address.Queue("receive-holds")
	r1 := e.sub(a, 1)
	e.send(e.sender(a), "held")
	got := make(chan *amqp.Message, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		m, _ := r1.Receive(ctx)
		got <- m
	}()
	<-paused
	require.NoError(t, r1.Close(context.Background()))
	r2 := e.sub(a, 1)
	m2 := recv(t, r2)
	require.Equal(t, "held", string(m2.GetData()))
	settle(t, r2, m2, accept)
	e.churn(64)
	close(resume)
	m1 := <-got
	require.NotNil(t, m1)
	require.Equal(t, "held", string(m1.GetData()))
}
