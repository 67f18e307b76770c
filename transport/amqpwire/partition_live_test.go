package amqpwire_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// TestLivePartitionQueueSingleActiveConsumer: a partition queue is declared
// quorum with x-single-active-consumer; of two receivers only the first
// gets messages, and when it detaches the second gets what it had not
// settled, in order. A plain queue of a partition's name is refused.
// oneActiveThenHandOver sends three messages through snd to a queue that
// first and second (both with credit) consume: first, the active one, gets
// the first message and second nothing; once first detaches, second gets
// the other two in order.
func oneActiveThenHandOver(t *testing.T, snd transport.Sender, first, second transport.Receiver) {
	t.Helper()
	ctx := testContext(t)
	for _, b := range []string{"m0", "m1", "m2"} {
		rc, err := snd.Send(ctx, text(b), false)
		must(t, err, "send")
		_, err = rc.Wait(ctx)
		must(t, err, "outcome")
	}
	m := receive(t, first, 10*time.Second)
	expect(t, bodyOf(m) == "m0", "first got %q", bodyOf(m))
	must(t, first.Settle(ctx, m, messages.Outcome{Kind: messages.Accepted}), "settle")
	// The inactive receiver has credit and gets nothing: a bound on a
	// negative check.
	qctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := second.Receive(qctx)
	cancel()
	expect(t, errors.Is(err, context.DeadlineExceeded), "the second receiver got a message: %v", err)

	must(t, first.Close(ctx), "detach the first")
	for _, want := range []string{"m1", "m2"} {
		m := receive(t, second, 10*time.Second)
		expect(t, bodyOf(m) == want, "after the hand-over got %q, want %q", bodyOf(m), want)
		must(t, second.Settle(ctx, m, messages.Outcome{Kind: messages.Accepted}), "settle")
	}
}

func TestLivePartitionQueueSingleActiveConsumer(t *testing.T) {
	conn := connect(t)
	s := session(t, conn)
	base := queueName(t, conn) // deleted by queueName; only its .p<i> are used
	pa := address.Partitioned(base, 2)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := range 2 {
			if err := brokeradmin.DeleteQueue(ctx, conn.Management(), pa.Partition(i).Name()); err != nil {
				t.Errorf("delete queue: %v", err)
			}
		}
	})
	p0 := pa.Partition(0)
	first := newReceiver(t, s, transport.ReceiverOptions{Address: p0, Credit: 10})
	second := newReceiver(t, s, transport.ReceiverOptions{Address: p0, Credit: 10})
	info, err := conn.Management().QueueInfo(testContext(t), p0.Name())
	must(t, err, "queue info")
	expect(t, info.Type == amqpwire.Quorum && info.Arguments["x-single-active-consumer"] == true, "declared %+v", info)
	must(t, first.IssueCredit(10), "credit")
	must(t, second.IssueCredit(10), "credit")

	oneActiveThenHandOver(t, newSender(t, s, p0), first, second)
	ctx := testContext(t)

	// A queue of that name declared without the argument is not used as
	// a partition queue: the attach fails, naming the address.
	p1 := pa.Partition(1)
	_, err = conn.Management().DeclareQueue(ctx, amqpwire.QueueSpec{Name: p1.Name()})
	must(t, err, "declare a plain queue")
	_, err = s.NewReceiver(ctx, transport.ReceiverOptions{Address: p1, Credit: 1})
	var le *transport.LinkError
	expect(t, errors.As(err, &le) && le.Address == p1.String(), "attach to a plain queue: %v", err)
	expect(t, err != nil && strings.Contains(err.Error(), "x-single-active-consumer"), "error %v", err)
}
