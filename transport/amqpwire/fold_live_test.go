package amqpwire_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// fill sends n messages "0".."n-1" to q and waits for every outcome.
func fill(t *testing.T, s transport.Session, q address.Address, n int) {
	t.Helper()
	snd := newSender(t, s, q)
	ctx := testContext(t)
	var receipts []transport.Receipt
	for i := range n {
		rc, err := snd.Send(ctx, text(fmt.Sprint(i)), false)
		must(t, err, "send")
		receipts = append(receipts, rc)
	}
	for _, rc := range receipts {
		o, err := rc.Wait(ctx)
		must(t, err, "outcome")
		expect(t, o.Kind == messages.Accepted, "outcome %v", o)
	}
}

// takeAll receives n messages with credit n.
func takeAll(t *testing.T, rcv transport.Receiver, n int) []*amqp.Message {
	t.Helper()
	must(t, rcv.IssueCredit(uint32(n)), "issue credit")
	var got []*amqp.Message
	for range n {
		got = append(got, receive(t, rcv, 10*time.Second))
	}
	return got
}

// nothingMore: a fresh receiver on q gets no message for a while.
func nothingMore(t *testing.T, s transport.Session, q address.Address) {
	t.Helper()
	rcv, err := s.NewReceiver(testContext(t), transport.ReceiverOptions{Address: q, Credit: 10})
	must(t, err, "attach")
	defer func() { _ = rcv.Close(context.Background()) }()
	must(t, rcv.IssueCredit(10), "issue credit")
	quiet, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	m, err := rcv.Receive(quiet)
	cancel()
	expect(t, m == nil && errors.Is(err, context.DeadlineExceeded), "a message is left (err %v)", err)
}

// TestLiveFoldedSettlement: accepts written back to back reach RabbitMQ 4
// folded into ranges, and settle every delivery: once the link is
// detached (which would return any unsettled delivery to the queue) the
// queue is empty.
func TestLiveFoldedSettlement(t *testing.T) {
	const n = 500
	conn := connect(t)
	s := session(t, conn)
	q := address.Queue(queueName(t, conn))
	fill(t, s, q, n)
	rcv, err := s.NewReceiver(testContext(t), transport.ReceiverOptions{Address: q, Credit: n})
	must(t, err, "attach receiver")
	ctx := testContext(t)
	before := amqpwire.FoldedDispositions(conn)
	for _, m := range takeAll(t, rcv, n) {
		must(t, rcv.Settle(ctx, m, messages.Outcome{Kind: messages.Accepted}), "settle")
	}
	must(t, rcv.Close(ctx), "detach")
	folded := amqpwire.FoldedDispositions(conn) - before
	expect(t, folded > 0, "no disposition was folded")
	t.Logf("%d of %d dispositions folded into the one before", folded, n)
	info, err := conn.Management().QueueInfo(ctx, q.Name())
	must(t, err, "queue info")
	expect(t, info.Messages == 0, "%d messages left after the detach, want 0", info.Messages)
	nothingMore(t, s, q)
}

// TestLiveFoldedRedelivery: deliveries left unsettled between folded
// ranges come back, exactly they, when the link detaches.
func TestLiveFoldedRedelivery(t *testing.T) {
	const n = 300
	conn := connect(t)
	s := session(t, conn)
	q := address.Queue(queueName(t, conn))
	fill(t, s, q, n)
	rcv, err := s.NewReceiver(testContext(t), transport.ReceiverOptions{Address: q, Credit: n})
	must(t, err, "attach receiver")
	ctx := testContext(t)
	before := amqpwire.FoldedDispositions(conn)
	var kept []string
	for i, m := range takeAll(t, rcv, n) {
		expect(t, bodyOf(m) == fmt.Sprint(i), "message %d is %q", i, bodyOf(m))
		if i%50 >= 20 && i%50 < 30 { // ten left unsettled in every fifty
			kept = append(kept, bodyOf(m))
			continue
		}
		must(t, rcv.Settle(ctx, m, messages.Outcome{Kind: messages.Accepted}), "settle")
	}
	must(t, rcv.Close(ctx), "detach")
	expect(t, amqpwire.FoldedDispositions(conn) > before, "no disposition was folded")
	info, err := conn.Management().QueueInfo(ctx, q.Name())
	must(t, err, "queue info")
	expect(t, info.Messages == uint64(len(kept)), "%d messages in the queue after the detach, want the %d unsettled", info.Messages, len(kept))

	again := newReceiver(t, s, transport.ReceiverOptions{Address: q, Credit: uint32(len(kept))})
	var back []string
	for _, m := range takeAll(t, again, len(kept)) {
		back = append(back, bodyOf(m))
		must(t, again.Settle(ctx, m, messages.Outcome{Kind: messages.Accepted}), "settle")
	}
	slices.Sort(back)
	slices.Sort(kept)
	expect(t, slices.Equal(back, kept), "redelivered %v, want %v", back, kept)
	must(t, again.Close(ctx), "detach")
	nothingMore(t, s, q)
}

// TestLiveHeldSettlementReachesTheBroker: a connection that only consumes
// and settles, with all its credit issued up front, writes no frame of its
// session after its last dispositions, so the writer holds the tail of the
// range back (dispmerge.go); it still reaches the broker within the hold's
// bound: the deliveries the broker counts unacknowledged go from n to 0
// while the link stays attached.
func TestLiveHeldSettlementReachesTheBroker(t *testing.T) {
	const n = 200
	conn := connect(t)
	s := session(t, conn)
	q := address.Queue(queueName(t, conn))
	fill(t, s, q, n)
	consumer := connect(t)
	cs := session(t, consumer)
	rcv := newReceiver(t, cs, transport.ReceiverOptions{Address: q, Credit: n})
	ctx := testContext(t)
	got := takeAll(t, rcv, n)
	// The broker's counts lag (a quorum queue publishes them on its tick):
	// first see it count the deliveries, then see it count none.
	untilUnacked(t, q.Name(), n, "before settling them")
	expired := amqpwire.ExpiredHolds(consumer)
	for _, m := range got {
		must(t, rcv.Settle(ctx, m, messages.Outcome{Kind: messages.Accepted}), "settle")
	}
	folded := amqpwire.FoldedDispositions(consumer)
	t.Logf("%d of %d dispositions folded into the one before", folded, n)
	expect(t, folded > 0, "no disposition was folded")
	untilUnacked(t, q.Name(), 0, "after settling them, the link attached")
	expect(t, amqpwire.ExpiredHolds(consumer) > expired, "no hold ran out: something else wrote the held range")
	info, err := conn.Management().QueueInfo(ctx, q.Name())
	must(t, err, "queue info")
	expect(t, info.Messages == 0, "%d messages on the queue, want 0", info.Messages)
}

// untilUnacked waits, for at most 30 s, until the broker counts want
// deliveries of queue name unacknowledged.
func untilUnacked(t *testing.T, name string, want int, when string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for got := unacked(t, name); got != want; got = unacked(t, name) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d deliveries unacknowledged after 30 s, want %d", when, got, want)
		}
	}
}

// unacked is how many deliveries of queue name the broker counts
// unacknowledged (rabbitmqctl, through the test broker's script); the test
// is Missing it where the script cannot run.
func unacked(t *testing.T, name string) int {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "test", "broker", "rabbitmq4.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", script, "ctl", "list_queues", "name", "messages_unacknowledged",
		"--quiet", "--no-table-headers").Output()
	if err != nil {
		livetest.Missing(t, "rabbitmqctl through test/broker/rabbitmq4.sh ctl: "+err.Error())
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, err := strconv.Atoi(f[1])
			must(t, err, "messages_unacknowledged of "+name)
			return v
		}
	}
	t.Fatalf("rabbitmqctl does not list queue %s", name)
	return 0
}
