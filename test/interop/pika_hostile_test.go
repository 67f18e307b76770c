package interop

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// Hostile input over AMQP 0-9-1, live: pika publishes one message whose
// headers amqp091-go will not read (it fails the frame and closes the
// connection), then 300 ordinary ones, to a queue an App on Dial091 consumes
// with the defaults. The App must reject the hostile one alone (the queue
// dead-letters it), count it as poison, and handle every ordinary one once,
// without a reconnect. Headers at the bounds are handled as any message.

type pikaHostileCase struct {
	spec   string // PEER_HOSTILE
	poison bool   // past the bounds
}

var pikaHostileCases = []pikaHostileCase{
	{spec: "entries:8193", poison: true},
	{spec: "tables:33", poison: true},
	{spec: "arrays:20000", poison: true},
	{spec: "entries:8192"},
	{spec: "tables:32"},
}

func sumCounter(n *amqpactor.Node, name string) uint64 {
	c := n.Counters[name]
	for _, k := range n.Children {
		c += sumCounter(k, name)
	}
	return c
}

// TestPikaHostileToDial091 runs every case on a quorum and on a classic
// queue. The figures go to docs/RELIABILITY.md ("Hostile input, round
// three").
func TestPikaHostileToDial091(t *testing.T) {
	for _, classic := range []bool{false, true} {
		kind := map[bool]string{false: "quorum", true: "classic"}[classic]
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, pikaPeer)
			for _, c := range pikaHostileCases {
				t.Run(c.spec, func(t *testing.T) { runPikaHostile(t, e, c, classic) })
			}
		})
	}
}

// app091For is an App on Dial091 that subscribes h to q (a classic queue
// when classic) with args, started and stopped with the test.
func app091For(t *testing.T, e *env, q string, classic bool, args map[string]any, h amqpactor.Handler) *amqpactor.App {
	t.Helper()
	app := amqpactor.New(amqpactor.Dial091(e.url, amqpactor.WithContainerID("interop-hostile-091")),
		amqpactor.WithName("hostile-091"))
	opts := []amqpactor.SubscribeOption{amqpactor.WithQueueArguments(args)}
	if classic {
		opts = append(opts, amqpactor.WithClassicQueue())
	}
	if _, err := app.Subscribe(amqpactor.Queue(q), h, opts...); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if err := app.Start(testContext(t, 30*time.Second)); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return app
}

func runPikaHostile(t *testing.T, e *env, c pikaHostileCase, classic bool) {
	q := e.queue("hostile091")
	dlq := e.declare("hostile091-dl")
	var mu sync.Mutex
	got := map[string]int{}
	handled := make(chan struct{}, 2*hostileNormal)
	h := func(ctx context.Context, m *amqpactor.Message) error {
		mu.Lock()
		got[fmt.Sprint(m.MessageID)]++
		mu.Unlock()
		handled <- struct{}{}
		return nil
	}
	app := app091For(t, e, q, classic, map[string]any{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}, h)

	ctx := testContext(t, 90*time.Second)
	began := time.Now()
	var res pikaResult
	pikaPeer.run(t, "hostile", e.peerEnv(q, "PEER_HOSTILE", c.spec, "PEER_COUNT", fmt.Sprint(hostileNormal)), &res)
	if res.Sent != 1+hostileNormal {
		t.Fatalf("pika sent %d messages, want %d", res.Sent, 1+hostileNormal)
	}
	want := hostileNormal
	if !c.poison {
		want++
	}
	for i := 0; i < want; i++ {
		select {
		case <-handled:
		case <-ctx.Done():
			mu.Lock()
			n := len(got)
			mu.Unlock()
			t.Fatalf("handled %d of %d messages (%d distinct)", i, want, n)
		}
	}
	took := time.Since(began)

	var rn, tree *amqpactor.Node
	poison := uint64(0)
	if c.poison {
		poison = 1
	}
	require.Eventually(t, func() bool {
		var err error
		if tree, err = app.Tree(ctx); err != nil {
			return false
		}
		rn = findReceiver(tree, q)
		return rn != nil && rn.Counters["poison"] >= poison && rn.Counters["accepted"] >= uint64(want)
	}, 10*time.Second, 10*time.Millisecond, "the receiver counts %d poison and %d accepts", poison, want)
	require.Equal(t, poison, rn.Counters["poison"], "poison counter")
	require.Equal(t, poison, rn.Counters["rejected"], "rejected counter")
	require.EqualValues(t, want, rn.Counters["accepted"], "accepted counter")
	reconnects := sumCounter(tree, "reconnects")
	require.Zero(t, reconnects, "reconnects")
	require.Zero(t, restarts(tree), "restarts in the tree")

	mu.Lock()
	once := 0
	for i := 0; i < hostileNormal; i++ {
		if got[fmt.Sprintf("normal-%03d", i)] == 1 {
			once++
		}
	}
	hostileHandled := got["hostile"]
	mu.Unlock()
	require.Equal(t, hostileNormal, once, "ordinary messages handled exactly once")
	if c.poison {
		require.Zero(t, hostileHandled, "the hostile message reached the handler")
	} else {
		require.Equal(t, 1, hostileHandled, "the message at the bounds is handled once")
	}

	// The queue dead-letters the hostile message, whole, and holds nothing.
	var left, dead uint64
	require.Eventually(t, func() bool {
		info, err := e.mgmt.QueueInfo(ctx, q)
		dl, derr := e.mgmt.QueueInfo(ctx, dlq)
		left, dead = info.Messages, dl.Messages
		return err == nil && derr == nil && left == 0 && dead == poison
	}, 10*time.Second, 20*time.Millisecond, "queue empty and %d dead-lettered", poison)
	t.Logf("FIGURES 091 %s | %s | poison %d, rejected %d, dead-lettered %d | %d/%d handled once | reconnects %d | %v",
		map[bool]string{false: "quorum", true: "classic"}[classic], c.spec, rn.Counters["poison"], rn.Counters["rejected"],
		dead, once, hostileNormal, reconnects, took.Round(time.Millisecond))
}

// TestPikaDeliveryCountSpoof: a publisher's x-delivery-count header is not
// the delivery-count. A first delivery has 0 on either queue type; a
// redelivery has the quorum queue's own count (1), and 0 on a classic
// queue, which keeps no count.
func TestPikaDeliveryCountSpoof(t *testing.T) {
	for _, classic := range []bool{false, true} {
		kind := map[bool]string{false: "quorum", true: "classic"}[classic]
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, pikaPeer)
			q := e.queue("spoof091")
			counts := make(chan uint32, 4)
			var calls atomic.Int32
			h := func(ctx context.Context, m *amqpactor.Message) error {
				counts <- m.DeliveryCount
				if calls.Add(1) == 1 {
					return fmt.Errorf("first attempt fails, so that it comes back")
				}
				return nil
			}
			app091For(t, e, q, classic, nil, h)
			var res pikaResult
			pikaPeer.run(t, "hostile", e.peerEnv(q, "PEER_HOSTILE", "count:1000", "PEER_COUNT", "0"), &res)
			ctx := testContext(t, 30*time.Second)
			var got []uint32
			for len(got) < 2 {
				select {
				case n := <-counts:
					got = append(got, n)
				case <-ctx.Done():
					t.Fatalf("delivered %d times, want 2 (counts %v)", len(got), got)
				}
			}
			want := []uint32{0, 1}
			if classic {
				want = []uint32{0, 0}
			}
			require.Equal(t, want, got, "delivery-count of the first delivery and of the redelivery")
			t.Logf("FIGURES 091 %s | x-delivery-count 1000 from the publisher | delivery-counts %v", kind, got)
		})
	}
}
