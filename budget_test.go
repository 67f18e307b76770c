package amqpactor_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

func nodesOf(n *amqpactor.Node, kind string, into []*amqpactor.Node) []*amqpactor.Node {
	if n.Kind == kind {
		into = append(into, n)
	}
	for _, c := range n.Children {
		into = nodesOf(c, kind, into)
	}
	return into
}

func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

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
	block := make(chan struct{})
	var handled atomic.Int64
	names := make([]string, subs)
	for i := range names {
		names[i] = fmt.Sprintf("budget-%d", i)
		_, err := app.Subscribe(amqpactor.Queue(names[i]), func(ctx context.Context, m *amqpactor.Message) error {
			select {
			case <-block:
			case <-ctx.Done():
				return ctx.Err()
			}
			handled.Add(1)
			return nil
		}, amqpactor.WithCredit(256))
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	var unblock sync.Once
	// Before Stop, should an assertion fail while the handlers block.
	defer unblock.Do(func() { close(block) })

	base := heapInuse()
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
		for _, r := range nodesOf(tree, "receiver", nil) {
			delivered += r.Counters["delivered"]
		}
		left := 0
		for _, name := range names {
			left += b.QueueDepth(name)
		}
		return delivered == uint64(subs*perQueue-left) && delivered >= share
	}, 30*time.Second, 10*time.Millisecond)

	grown := int64(heapInuse()) - int64(base) - int64(stored)
	t.Logf("handlers blocked: heap in use beyond the broker's copies %.1f MiB, budget counter %d KiB (peak %d KiB, limit %d MiB)",
		float64(grown)/(1<<20), tree.Counters["inflight_bytes"]>>10, tree.Counters["inflight_bytes_peak"]>>10, limit>>20)
	var delivered, perLink uint64
	for _, r := range nodesOf(tree, "receiver", nil) {
		delivered += r.Counters["delivered"]
		perLink += r.Counters["inflight_bytes"]
		require.LessOrEqual(t, r.Counters["inflight_bytes"], uint64(limit/subs), "a link within its share: %v", r.Counters)
	}
	require.LessOrEqual(t, delivered, uint64(bound/size), "deliveries held at once")
	require.EqualValues(t, limit, tree.Counters["max_inflight_bytes"])
	require.LessOrEqual(t, tree.Counters["inflight_bytes_peak"], uint64(bound), "the budget's counter never passed its bound")
	require.Equal(t, tree.Counters["inflight_bytes"], perLink, "the root counts what its receivers count")
	require.EqualValues(t, delivered*size, perLink, "nothing reserved: every credit granted has arrived")
	// Each delivery held is two copies here (the transfer and the
	// handler's body), plus 16 MiB for everything else.
	require.Less(t, grown, int64(2*bound+16<<20), "heap beyond the broker's copies")

	unblock.Do(func() { close(block) })
	require.Eventually(t, func() bool { return handled.Load() == subs*perQueue }, 60*time.Second, 10*time.Millisecond)
	for _, name := range names {
		require.Zero(t, b.QueueDepth(name), name)
		require.Eventually(t, func() bool { return b.Unsettled(name) == 0 }, 10*time.Second, time.Millisecond, name)
	}
	require.EqualValues(t, subs*perQueue, handled.Load(), "lost 0, none twice")
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	for _, r := range nodesOf(tree, "receiver", nil) {
		require.Zero(t, r.Counters["unsettled"], r.Counters)
	}
	// What is left is credit out on empty queues, reserved: within the
	// limit, and counted by the receivers that hold it.
	require.LessOrEqual(t, tree.Counters["inflight_bytes"], uint64(limit))
}
