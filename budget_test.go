package amqpactor_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/test/harness"
)

// TestMaxInFlightBytesBoundsBlockedHandlers is issue 29's case scaled to the
// in-process broker: 10 subscriptions with credit 256, 512 KiB messages,
// handlers that block. Credit alone lets every link take its whole queue (320
// messages, twice that in memory: the transfer and the handler's body); the
// budget of 64 MiB holds the links to their share of it, and once the handlers
// return every message is handled.
func TestMaxInFlightBytesBoundsBlockedHandlers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	const (
		subs, perQueue = 10, 32
		size           = 512 << 10
		limit          = 64 << 20
		// What the budget may count: its limit and one message per link.
		bound = limit + subs*size
	)
	b := inproc.New()
	app := amqpactor.New(b, amqpactor.WithMaxInFlightBytes(limit))
	blocked := harness.NewBlocker()
	names := make([]string, subs)
	for i := range names {
		names[i] = fmt.Sprintf("budget-%d", i)
		_, err := app.Subscribe(amqpactor.Queue(names[i]), blocked.Handle, amqpactor.WithCredit(256))
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	// Before Stop, should an assertion fail while the handlers block.
	defer blocked.Release()

	base := harness.HeapInuse()
	body := make([]byte, size)
	for _, name := range names {
		for range perQueue {
			require.NoError(t, b.Publish(amqpactor.Queue(name), &amqp.Message{Data: [][]byte{body}}))
		}
	}
	body = nil
	// The broker's own copy of every message stays until it is accepted.
	stored := uint64(subs * perQueue * size)

	// Wait until every transfer the broker made has reached a pump (what
	// left the queues is what the receivers count) and the links hold
	// what their share of the budget allows: 12 of 512 KiB each.
	const share = limit / subs / size * subs
	var tree *amqpactor.Node
	require.Eventually(t, func() bool {
		var err error
		tree, err = app.Tree(ctx)
		require.NoError(t, err)
		var delivered uint64
		for _, r := range harness.OfKind(tree, "receiver") {
			delivered += r.Counters["delivered"]
		}
		left := 0
		for _, name := range names {
			left += b.QueueDepth(name)
		}
		return delivered == uint64(subs*perQueue-left) && delivered >= share
	}, 30*time.Second, 10*time.Millisecond)

	grown := int64(harness.HeapInuse()) - int64(base) - int64(stored)
	t.Logf("handlers blocked: heap in use beyond the broker's copies %.1f MiB, budget counter %d KiB (peak %d KiB, limit %d MiB)",
		float64(grown)/(1<<20), tree.Counters["inflight_bytes"]>>10, tree.Counters["inflight_bytes_peak"]>>10, limit>>20)
	var delivered, perLink uint64
	for _, r := range harness.OfKind(tree, "receiver") {
		delivered += r.Counters["delivered"]
		perLink += r.Counters["inflight_bytes"]
		require.LessOrEqual(t, r.Counters["inflight_bytes"], uint64(limit/subs), "a link within its share: %v", r.Counters)
	}
	require.LessOrEqual(t, delivered, uint64(bound/size), "deliveries held at once")
	require.LessOrEqual(t, tree.Counters["inflight_bytes_peak"], uint64(bound), "the budget's counter never passed its bound")
	require.Equal(t, tree.Counters["inflight_bytes"], perLink, "the root counts what its receivers count")
	require.EqualValues(t, delivered*size, perLink, "nothing reserved: every credit granted has arrived")
	// Each delivery held is two copies here (the transfer and the
	// handler's body), plus 16 MiB for everything else.
	require.Less(t, grown, int64(2*bound+16<<20), "heap beyond the broker's copies")

	blocked.Release()
	require.Eventually(t, func() bool { return blocked.Handled() == subs*perQueue }, 60*time.Second, 10*time.Millisecond)
	for _, name := range names {
		require.Zero(t, b.QueueDepth(name), name)
		require.Eventually(t, func() bool { return b.Unsettled(name) == 0 }, 10*time.Second, time.Millisecond, name)
	}
	require.EqualValues(t, subs*perQueue, blocked.Handled(), "lost 0, none twice")
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	for _, r := range harness.OfKind(tree, "receiver") {
		require.Zero(t, r.Counters["unsettled"], r.Counters)
	}
	// What is left is credit out on empty queues, reserved: within the
	// limit, and counted by the receivers that hold it.
	require.LessOrEqual(t, tree.Counters["inflight_bytes"], uint64(limit))
}

// subReceiver is the receiver node of the subscription on addr.
func subReceiver(t *testing.T, app *amqpactor.App, addr string) *amqpactor.Node {
	t.Helper()
	tree, err := app.Tree(context.Background())
	require.NoError(t, err)
	for _, r := range harness.OfKind(tree, "receiver") {
		if r.Address == addr || len(r.Address) > len(addr) && r.Address[:len(addr)+1] == addr+" " {
			return r
		}
	}
	return nil
}

func publishN(t *testing.T, b *inproc.Broker, q amqpactor.Address, n, size int) {
	t.Helper()
	body := make([]byte, size)
	for range n {
		require.NoError(t, b.Publish(q, &amqp.Message{Data: [][]byte{body}}))
	}
}

// TestMaxInFlightBytesReleasedWhenLinkEnds: a link the broker detaches while
// its handlers hold the whole budget gives its bytes back at once, so its
// replacement gets the budget again (a leak would leave it one credit).
func TestMaxInFlightBytesReleasedWhenLinkEnds(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	const size, limit, n = 64 << 10, 1 << 20, 40
	b := inproc.New()
	app := amqpactor.New(b, amqpactor.WithMaxInFlightBytes(limit), amqpactor.WithBackoff(time.Millisecond, 10*time.Millisecond))
	q := amqpactor.Queue("budget-detach")
	blocked := harness.NewBlocker()
	_, err := app.Subscribe(q, blocked.Handle, amqpactor.WithCredit(256))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	defer blocked.Release()

	publishN(t, b, q, n, size)
	full := func() bool {
		r := subReceiver(t, app, q.String())
		return r != nil && r.Counters["unsettled"] == limit/size && r.Counters["inflight_bytes"] == limit
	}
	require.Eventually(t, full, 10*time.Second, time.Millisecond, "the link holds the whole budget")
	require.Equal(t, 1, b.DetachLinks(q, "amqp:internal-error", "test detach"))
	require.Eventually(t, func() bool {
		r := subReceiver(t, app, q.String())
		return r != nil && r.State == "attached" && r.Restarts > 0
	}, 10*time.Second, time.Millisecond, "re-attached")
	require.Eventually(t, full, 10*time.Second, time.Millisecond, "the new link holds the whole budget again")
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	require.EqualValues(t, limit, tree.Counters["inflight_bytes"], "nothing of the old link is still counted")
	require.LessOrEqual(t, tree.Counters["inflight_bytes_peak"], uint64(limit+size))

	blocked.Release()
	require.Eventually(t, func() bool { return blocked.Handled() == n }, 20*time.Second, time.Millisecond)
}

// TestMaxInFlightBytesWakesOtherLinks: a link that the budget keeps short
// is given credit when another link settles, not only at its own settles
// (here it never settles: its handlers block).
func TestMaxInFlightBytesWakesOtherLinks(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	const size, limit = 64 << 10, 1 << 20
	b := inproc.New()
	app := amqpactor.New(b, amqpactor.WithMaxInFlightBytes(limit))
	qa, qb := amqpactor.Queue("budget-a"), amqpactor.Queue("budget-b")
	blockA, blockB := harness.NewBlocker(), harness.NewBlocker()
	handled := func() int64 { return blockA.Handled() + blockB.Handled() }
	_, err := app.Subscribe(qa, blockA.Handle)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	defer blockB.Release()
	defer blockA.Release()

	// Alone, a holds the whole budget.
	publishN(t, b, qa, limit/size, size)
	require.Eventually(t, func() bool {
		r := subReceiver(t, app, qa.String())
		return r != nil && r.Counters["unsettled"] == limit/size
	}, 10*time.Second, time.Millisecond)
	_, err = app.Subscribe(qb, blockB.Handle)
	require.NoError(t, err)
	publishN(t, b, qb, 32, size)
	// b gets its one credit past the budget, and no more while a holds it.
	require.Eventually(t, func() bool {
		r := subReceiver(t, app, qb.String())
		return r != nil && r.Counters["unsettled"] == 1
	}, 10*time.Second, time.Millisecond)
	require.Equal(t, 31, b.QueueDepth(qb.Name()), "no credit for b while the budget is spent")

	blockA.Release()
	require.Eventually(t, func() bool { return handled() == limit/size }, 10*time.Second, time.Millisecond)
	// a's settles woke b: it holds its share now, its handlers still blocked.
	require.Eventually(t, func() bool {
		r := subReceiver(t, app, qb.String())
		return r != nil && r.Counters["unsettled"] == limit/2/size
	}, 10*time.Second, time.Millisecond, "b given its share when a settled")
	blockB.Release()
	require.Eventually(t, func() bool { return handled() == limit/size+32 }, 10*time.Second, time.Millisecond)
}
