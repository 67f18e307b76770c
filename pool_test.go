package amqpactor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/transport"
)

// handledSet counts the messages each queue's handler saw.
type handledSet struct {
	mu   sync.Mutex
	seen map[string]int
}

func (h *handledSet) handler(q string) amqpactor.Handler {
	return func(context.Context, *amqpactor.Message) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.seen == nil {
			h.seen = map[string]int{}
		}
		h.seen[q]++
		return nil
	}
}

// subscribeAll subscribes app to the queues prefix-0 to prefix-(n-1), each
// with h's handler for it.
func (h *handledSet) subscribeAll(t *testing.T, app *amqpactor.App, prefix string, n int, opts ...amqpactor.SubscribeOption) {
	t.Helper()
	for i := range n {
		q := fmt.Sprintf("%s-%d", prefix, i)
		_, err := app.Subscribe(amqpactor.Queue(q), h.handler(q), opts...)
		require.NoError(t, err)
	}
}

// footprint is what subscriptions added since it was taken: goroutines and
// memory, per subscription.
type footprint struct {
	n      int
	g0     int
	before runtime.MemStats
}

func newFootprint(n int) *footprint {
	f := &footprint{n: n}
	runtime.GC()
	runtime.ReadMemStats(&f.before)
	f.g0 = runtime.NumGoroutine()
	return f
}

// goroutines is how many goroutines each subscription added.
func (f *footprint) goroutines() float64 { return float64(runtime.NumGoroutine()-f.g0) / float64(f.n) }

// kib is the heap and the goroutine stacks, in KiB, each subscription added.
func (f *footprint) kib() (heap, stacks float64) {
	var after runtime.MemStats
	runtime.GC() // twice: the first only moves what pools keep to their victim caches
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := func(a, b uint64) float64 { return float64(int64(a)-int64(b)) / 1024 / float64(f.n) }
	return per(after.HeapAlloc, f.before.HeapAlloc), per(after.StackInuse, f.before.StackInuse)
}

func (h *handledSet) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.seen {
		n += c
	}
	return n
}

func (h *handledSet) queues() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}

// connectionNodes walks the tree, requiring that every node's PID extends
// its parent's, and returns the connection nodes.
func connectionNodes(t *testing.T, tree *amqpactor.Node) []*amqpactor.Node {
	t.Helper()
	var conns []*amqpactor.Node
	var walk func(n *amqpactor.Node)
	walk = func(n *amqpactor.Node) {
		if n.Kind == "connection" {
			conns = append(conns, n)
		}
		for _, c := range n.Children {
			require.True(t, strings.HasPrefix(c.ActorPID().Id, n.ActorPID().Id+"/"),
				"%s (%s) is drawn under %s (%s)", c.Name, c.ActorPID().Id, n.Name, n.ActorPID().Id)
			walk(c)
		}
	}
	walk(tree)
	return conns
}

// An App with more subscriptions than one connection holds sessions (issue
// 27: RabbitMQ 4 allows 64) spreads them over a pool of connections: Start
// succeeds, every subscription handles its message, the tree shows each
// connection, and a Subscribe past the first connections' room after Start
// works too.
func TestPoolSpreadsSubscriptionsOverConnections(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	b := inproc.New(inproc.WithMaxSessions(16))
	app := amqpactor.New(b, amqpactor.WithName("pool"))
	var h handledSet
	const n = 100
	h.subscribeAll(t, app, "pool", n, amqpactor.WithPartitions(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	stopped := false
	defer func() {
		if !stopped {
			_ = app.Stop(ctx)
		}
	}()
	for i := range n {
		require.NoError(t, app.Publish(ctx, amqpactor.Queue(fmt.Sprintf("pool-%d", i)), &amqpactor.Message{Body: []byte("x")}))
	}
	require.Eventually(t, func() bool { return h.queues() == n }, 30*time.Second, 10*time.Millisecond)

	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	require.Equal(t, "connection", tree.Name, "the tree's top node is the first connection")
	conns := connectionNodes(t, tree)
	// 16 sessions a connection, some kept on the first for the publisher
	// and requests: 100 subscriptions need at least 7 connections.
	require.GreaterOrEqual(t, len(conns), 7)
	require.Equal(t, "connection-2", conns[1].Name)
	require.GreaterOrEqual(t, b.Conns(), 7)
	require.Eventually(t, func() bool { return app.Ready() == nil }, 10*time.Second, 10*time.Millisecond)

	// After Start, past the room left: a new connection is added.
	for i := n; i < n+20; i++ {
		q := fmt.Sprintf("pool-%d", i)
		_, err := app.Subscribe(amqpactor.Queue(q), h.handler(q), amqpactor.WithPartitions(1))
		require.NoError(t, err)
		require.NoError(t, app.Publish(ctx, amqpactor.Queue(q), &amqpactor.Message{Body: []byte("x")}))
	}
	require.Eventually(t, func() bool { return h.queues() == n+20 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, app.Health())
	stopped = true
	require.NoError(t, app.Stop(ctx))
	require.Zero(t, b.Conns())
}

// WithMaxSessionsPerConnection lowers the figure the App plans with, for a
// broker that advertises more sessions than it allows (here, no limit).
func TestWithMaxSessionsPerConnectionLowersTheLimit(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	b := inproc.New()
	app := amqpactor.New(b, amqpactor.WithName("pool-opt"), amqpactor.WithMaxSessionsPerConnection(10))
	var h handledSet
	h.subscribeAll(t, app, "popt", 20, amqpactor.WithPartitions(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	// The first holds 10 less what it keeps for the publisher and
	// requests; the next hold 10 each.
	require.GreaterOrEqual(t, b.Conns(), 3)
	for i := range 20 {
		require.NoError(t, app.Publish(ctx, amqpactor.Queue(fmt.Sprintf("popt-%d", i)), &amqpactor.Message{Body: []byte("x")}))
	}
	require.Eventually(t, func() bool { return h.queues() == 20 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, app.Stop(ctx))
}

// A session the broker refuses although the App planned room for it (a
// broker that allows fewer than it advertised) fails the Subscribe with an
// error that names the limit and the option that lowers it; the connection
// and the other subscriptions go on.
func TestRefusedSessionNamesTheLimitAndTheOption(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	b := inproc.New(inproc.WithMaxSessions(16))
	app := amqpactor.New(b, amqpactor.WithName("pool-refused"))
	var h handledSet
	_, err := app.Subscribe(amqpactor.Queue("refused-0"), h.handler("refused-0"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()

	b.SetMaxSessions(1)
	_, err = app.Subscribe(amqpactor.Queue("refused-1"), h.handler("refused-1"))
	require.Error(t, err)
	require.ErrorContains(t, err, "resource-limit-exceeded")
	require.ErrorContains(t, err, "16 sessions")
	require.ErrorContains(t, err, "WithMaxSessionsPerConnection")

	b.SetMaxSessions(0)
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("refused-0"), &amqpactor.Message{Body: []byte("x")}))
	require.Eventually(t, func() bool { return h.queues() == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, b.Conns())
}

// byName returns the first node named name.
func byName(n *amqpactor.Node, name string) *amqpactor.Node {
	if n.Name == name {
		return n
	}
	for _, c := range n.Children {
		if f := byName(c, name); f != nil {
			return f
		}
	}
	return nil
}

// A connection of the pool is its own connection actor: its state changes
// and its subscriptions' name it in their paths, a panic resumes it (as the
// root resumes the first: a restart would stop every subscription under
// it), a lost connection is dialled again, and a subscription closed on it
// makes room for the next.
func TestPoolMemberIsAConnectionOfItsOwn(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	b := inproc.New(inproc.WithMaxSessions(12))
	var pathsMu sync.Mutex
	paths := map[string]string{}
	app := amqpactor.New(b, amqpactor.WithActorSystem(sys), amqpactor.WithName("pool-member"),
		amqpactor.WithStateChanges(func(c amqpactor.StateChange) {
			pathsMu.Lock()
			paths[c.Path] = c.To
			pathsMu.Unlock()
		}))
	var h handledSet
	subs := map[string]*amqpactor.Subscription{}
	for i := range 13 {
		q := fmt.Sprintf("member-%d", i)
		s, err := app.Subscribe(amqpactor.Queue(q), h.handler(q), amqpactor.WithPartitions(1))
		require.NoError(t, err)
		subs[q] = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	stopped := false
	defer func() {
		if !stopped {
			_ = app.Stop(ctx)
		}
	}()
	// 12 sessions less 8 kept on the first: member-4 to member-12 are on
	// connection-2, which keeps 3 spare.
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	member := byName(tree, "connection-2")
	require.NotNil(t, member)
	require.NotNil(t, byName(member, "subscription:pool-member.member-9"))
	require.Nil(t, byName(member, "subscription:pool-member.member-0"))
	// State changes reach the callback through the App's own goroutine,
	// after the tree has them: awaited, and never asserted under the lock
	// the callback takes.
	pathState := func(p string) string {
		pathsMu.Lock()
		defer pathsMu.Unlock()
		return paths[p]
	}
	for _, p := range []string{"connection/connection-2", "connection/connection-2/subscription:pool-member.member-9",
		"connection/connection-2/subscription:pool-member.member-9/receiver", "connection/subscription:pool-member.member-0"} {
		require.Eventually(t, func() bool { return pathState(p) == "attached" }, 10*time.Second, time.Millisecond,
			"%s: %q", p, pathState(p))
	}

	// A panic resumes it: the same actor, the same subscriptions.
	resumed := make(chan struct{}, 1)
	es := sys.EventStream.Subscribe(func(evt any) {
		if e, ok := evt.(*actor.SupervisorEvent); ok && e.Child.Equal(member.ActorPID()) && e.Directive == actor.ResumeDirective {
			select {
			case resumed <- struct{}{}:
			default:
			}
		}
	})
	defer sys.EventStream.Unsubscribe(es)
	sub := byName(member, "subscription:pool-member.member-9").ActorPID()
	sys.Root.Send(member.ActorPID(), &testhook.Crash{Reason: "test"})
	select {
	case <-resumed:
	case <-ctx.Done():
		t.Fatal("connection-2 was not resumed")
	}
	require.Eventually(t, func() bool {
		tree, err := app.Tree(ctx)
		require.NoError(t, err)
		m := byName(tree, "connection-2")
		return m != nil && m.Counters["panics"] == 1
	}, 10*time.Second, 10*time.Millisecond)
	tree, err = app.Tree(ctx)
	require.NoError(t, err)
	require.True(t, byName(tree, "connection-2").ActorPID().Equal(member.ActorPID()))
	require.True(t, byName(tree, "subscription:pool-member.member-9").ActorPID().Equal(sub), "its subscriptions were not stopped")

	// Every connection is dialled again after it is lost.
	require.Equal(t, 2, b.DropConnections(nil))
	require.Eventually(t, func() bool {
		tree, err := app.Tree(ctx)
		require.NoError(t, err)
		m := byName(tree, "connection-2")
		return m.Counters["reconnects"] == 1 && tree.Counters["reconnects"] == 1 && app.Ready() == nil
	}, 20*time.Second, 10*time.Millisecond)
	for i := range 13 {
		require.NoError(t, app.Publish(ctx, amqpactor.Queue(fmt.Sprintf("member-%d", i)), &amqpactor.Message{Body: []byte("x")}))
	}
	require.Eventually(t, func() bool { return h.queues() == 13 }, 20*time.Second, 10*time.Millisecond)

	// connection-2 is full: the next subscription opens connection-3, and
	// one closed on connection-2 makes room there for the one after.
	_, err = app.Subscribe(amqpactor.Queue("member-13"), h.handler("member-13"), amqpactor.WithPartitions(1))
	require.NoError(t, err)
	tree, err = app.Tree(ctx)
	require.NoError(t, err)
	require.NotNil(t, byName(byName(tree, "connection-3"), "subscription:pool-member.member-13"))
	require.NoError(t, subs["member-9"].Close(ctx))
	_, err = app.Subscribe(amqpactor.Queue("member-14"), h.handler("member-14"), amqpactor.WithPartitions(1))
	require.NoError(t, err)
	tree, err = app.Tree(ctx)
	require.NoError(t, err)
	require.NotNil(t, byName(byName(tree, "connection-2"), "subscription:pool-member.member-14"))
	require.Nil(t, byName(tree, "connection-4"))
	require.Equal(t, 3, b.Conns())

	stopped = true
	require.NoError(t, app.Stop(ctx))
	require.Zero(t, b.Conns())
}

// TestPoolFootprint logs the start time, goroutines and heap per idle
// subscription of POOL_SUBSCRIPTIONS queue subscriptions on the in-process
// broker, limited to POOL_SESSIONS sessions a connection (docs/BENCHMARKS.md).
// It is a measurement: without POOL_SUBSCRIPTIONS it skips.
func TestPoolFootprint(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("POOL_SUBSCRIPTIONS"))
	if n <= 0 {
		t.Skip("a measurement: set POOL_SUBSCRIPTIONS (and POOL_SESSIONS) to run it")
	}
	limit, _ := strconv.Atoi(os.Getenv("POOL_SESSIONS"))
	defer goleak.VerifyNone(t, ignoreThrottle)
	b := inproc.New(inproc.WithMaxSessions(limit))
	app := amqpactor.New(b, amqpactor.WithName("footprint"))
	var h handledSet
	h.subscribeAll(t, app, "fp", n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fp := newFootprint(n)
	began := time.Now()
	require.NoError(t, app.Start(ctx))
	took := time.Since(began)
	heap, _ := fp.kib()
	t.Logf("%d subscriptions, %d sessions a connection, %d connections: Start %v, %.1f goroutines and %.0f KiB heap per subscription",
		n, limit, b.Conns(), took.Round(time.Millisecond), fp.goroutines(), heap)
	require.NoError(t, app.Stop(ctx))
}

// failingAfter is a connector whose connections after the first fail to
// dial, as a broker at its connection limit would refuse them.
type failingAfter struct {
	*inproc.Broker
	mu    sync.Mutex
	dials int
}

func (f *failingAfter) Connect(ctx context.Context) (transport.Conn, error) {
	f.mu.Lock()
	f.dials++
	n := f.dials
	f.mu.Unlock()
	if n > 1 {
		return nil, errors.New("connection limit reached")
	}
	return f.Broker.Connect(ctx)
}

// A connection of the pool that cannot be dialled fails the subscriptions
// placed on it with its dial's error, naming it: Start fails, and closes
// what it opened.
func TestPoolMemberDialFailureFailsItsSubscriptions(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	b := inproc.New(inproc.WithMaxSessions(12))
	app := amqpactor.New(&failingAfter{Broker: b}, amqpactor.WithName("pool-dialfail"))
	var h handledSet
	h.subscribeAll(t, app, "dialfail", 6, amqpactor.WithPartitions(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := app.Start(ctx)
	require.Error(t, err)
	require.ErrorContains(t, err, "connection-2")
	require.ErrorContains(t, err, "connection limit reached")
	require.ErrorContains(t, err, "dialfail-4", "the first subscription placed on connection-2")
	require.NoError(t, app.Stop(ctx))
	require.Zero(t, b.Conns())
}
