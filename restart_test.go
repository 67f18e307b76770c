package amqpactor_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/internal/testhook"
)

// find returns the first node of kind whose address mentions addr; a
// partition has no address: the first of that dispatcher's.
func find(n *amqpactor.Node, kind, addr string) *amqpactor.Node {
	if kind == "partition" {
		if d := find(n, "dispatcher", addr); d != nil && len(d.Children) > 0 {
			return d.Children[0]
		}
		return nil
	}
	if n.Kind == kind && strings.Contains(n.Address, addr) {
		return n
	}
	for _, c := range n.Children {
		if f := find(c, kind, addr); f != nil {
			return f
		}
	}
	return nil
}

// crashNode crashes the node of the kind (on addr, or any with "") in app's
// tree, and returns it.
func crashNode(t *testing.T, ctx context.Context, sys *actor.ActorSystem, app *amqpactor.App, kind, addr string) *amqpactor.Node {
	t.Helper()
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	node := find(tree, kind, addr)
	require.NotNil(t, node, "no %s node for %q", kind, addr)
	sys.Root.Send(node.ActorPID(), &testhook.Crash{Reason: "test"})
	return node
}

// goPublish publishes the ids from, from+step, ... below n to orders on a
// goroutine of wg; its first failure goes to errs and ends it.
func goPublish(ctx context.Context, app *amqpactor.App, wg *sync.WaitGroup, errs chan<- error, from, step, n int) {
	wg.Go(func() {
		for i := from; i < n; i += step {
			if err := app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte(strconv.Itoa(i))}); err != nil {
				errs <- fmt.Errorf("publish %d: %w", i, err)
				return
			}
		}
	})
}

// echoed makes request i to rpc, its body the number, and checks that the
// reply echoes it; a failed request's error is wrapped, so that a caller can
// tell ErrRequestsRestarted.
func echoed(ctx context.Context, app *amqpactor.App, i int) error {
	body := strconv.Itoa(i)
	rep, err := app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte(body)})
	if err != nil {
		return fmt.Errorf("request %d: %w", i, err)
	}
	if string(rep.Body) != body {
		return fmt.Errorf("request %d got reply %q", i, rep.Body)
	}
	return nil
}

// noErrors waits for wg and requires that none of its goroutines sent an
// error.
func noErrors(t *testing.T, wg *sync.WaitGroup, errs chan error) {
	t.Helper()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// While 10,000 messages flow from publishers to a subscription of the same
// App on the in-process broker, the sender (several times), the
// subscription, the receiver, the dispatcher and a partition panic: every published message is handled
// (duplicates counted: a restarted receiver's link gives back what it had

// tally counts how often each published id (the body) was handled.
type tally struct {
	mu   sync.Mutex
	seen map[int]int
}

func newTally(n int) *tally { return &tally{seen: make(map[int]int, n)} }

func (c *tally) handle(_ context.Context, m *amqpactor.Message) error {
	id, _ := strconv.Atoi(string(m.Body))
	c.mu.Lock()
	c.seen[id]++
	c.mu.Unlock()
	return nil
}

// distinct is the number of ids handled at least once.
func (c *tally) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// duplicates is the number of handlings beyond the first of each id.
func (c *tally) duplicates() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	dups := 0
	for _, n := range c.seen {
		dups += n - 1
	}
	return dups
}

// not settled), the tree shows the restarts, and Stop leaves no goroutine.
func TestRestartsMidStream(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	baseline := runtime.NumGoroutine()
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName("restarts"))
	const n = 10000
	seen := newTally(n)
	_, err := app.Subscribe(amqpactor.Queue("orders"), seen.handle, amqpactor.WithPartitions(2))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	stopped := false
	defer func() {
		if !stopped {
			_ = app.Stop(ctx)
		}
	}()

	const publishers = 4
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for p := range publishers {
		goPublish(ctx, app, &wg, errs, p, publishers, n)
	}
	progress := seen.distinct
	// The subscription first: its restart replaces the receiver and the
	// dispatcher, whose nodes then start counting again.
	plan := []string{"sender", "subscription", "sender", "receiver", "sender", "dispatcher", "partition"}
	for i, kind := range plan {
		require.Eventually(t, func() bool { return progress() >= (i+1)*n/(len(plan)+2) }, 30*time.Second, time.Millisecond)
		crashNode(t, ctx, sys, app, kind, "orders")
	}
	noErrors(t, &wg, errs)
	require.Eventually(t, func() bool { return progress() == n }, 30*time.Second, time.Millisecond, "every published message handled")

	dups := seen.duplicates()
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	restarts := map[string]int{}
	for _, kind := range []string{"sender", "subscription", "receiver", "dispatcher", "partition"} {
		node := find(tree, kind, "orders")
		require.NotNil(t, node, kind)
		restarts[kind] = node.Restarts
		require.NotZero(t, node.Counters["panics"], "the %s node shows its restart", kind)
	}
	t.Logf("published %d, lost %d, duplicates %d, restarts %v", n, n-progress(), dups, restarts)
	require.Equal(t, 3, int(find(tree, "sender", "orders").Counters["panics"]))
	stopped = true
	require.NoError(t, app.Stop(ctx))
	// goleak (deferred above) checks that none is left but the actor
	// system's dead-letter throttle, started on the first dead letter.
	t.Logf("goroutines: %d before Start, %d after Stop", baseline, runtime.NumGoroutine())
}

// While 10,000 requests flow to a responder of the same App on the
// in-process broker, the requests actor panics three times: a caller
// waiting for its reply then fails at once with ErrRequestsRestarted (its
// reply link is gone) and sends again; every request gets its reply
// (lost 0; the responder's second answers counted as duplicates), the
// tree shows the restarts, and Stop leaves no goroutine.
func TestRequestsRestartMidStream(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName("requests-restarts"))
	const n = 10000
	var mu sync.Mutex
	handled := make(map[string]int, n)
	_, err := app.Subscribe(amqpactor.Queue("rpc"), amqpactor.Responder(func(_ context.Context, m *amqpactor.Message) (*amqpactor.Message, error) {
		mu.Lock()
		handled[string(m.Body)]++
		mu.Unlock()
		return &amqpactor.Message{Body: m.Body}, nil
	}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	stopped := false
	defer func() {
		if !stopped {
			_ = app.Stop(ctx)
		}
	}()

	var answered, retried atomic.Int64
	const callers = 8
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for p := range callers {
		wg.Go(func() {
			for i := p; i < n; i += callers {
				for {
					err := echoed(ctx, app, i)
					if errors.Is(err, amqpactor.ErrRequestsRestarted) {
						retried.Add(1)
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					answered.Add(1)
					break
				}
			}
		})
	}
	const panics = 3
	for i := range panics {
		require.Eventually(t, func() bool { return answered.Load() >= int64((i+1)*n/(panics+2)) }, 60*time.Second, time.Millisecond)
		crashNode(t, ctx, sys, app, "requests", "")
	}
	noErrors(t, &wg, errs)
	require.EqualValues(t, n, answered.Load(), "every request answered")
	mu.Lock()
	dups := 0
	for _, c := range handled {
		dups += c - 1
	}
	lost := n - len(handled)
	mu.Unlock()
	require.Zero(t, lost)
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	node := find(tree, "requests", "")
	require.NotNil(t, node)
	require.EqualValues(t, panics, node.Counters["panics"], "the requests node shows its restarts")
	require.Equal(t, panics, node.Restarts)
	t.Logf("requests %d, lost %d, sent again after a restart %d, duplicates %d", n, lost, retried.Load(), dups)
	stopped = true
	require.NoError(t, app.Stop(ctx))
}

// midStream is the scenario the publisher and connection restart tests
// share: an App on broker, its subscription on "orders" counting what it
// handles and a Responder on "rpc"; 4 goroutines publish 10,000 ids and 2
// make 2,000 round trips while crash is called len(plan) times, each once a
// further part of the ids is handled. It checks that no publish or request
// failed, every id was handled and every request answered, and returns the
// App, started (the caller stops it), with its context and tally.
func midStream(t *testing.T, broker *inproc.Broker, sys *actor.ActorSystem, name string, plan []string,
	crash func(ctx context.Context, app *amqpactor.App, which string)) (*amqpactor.App, context.Context, *tally) {
	t.Helper()
	app := amqpactor.New(broker, amqpactor.WithActorSystem(sys), amqpactor.WithName(name))
	const n, nreq = 10000, 2000
	seen := newTally(n)
	_, err := app.Subscribe(amqpactor.Queue("orders"), seen.handle, amqpactor.WithPartitions(2))
	require.NoError(t, err)
	_, err = app.Subscribe(amqpactor.Queue("rpc"), amqpactor.Responder(func(_ context.Context, m *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: m.Body}, nil
	}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	require.NoError(t, app.Start(ctx))
	// A failed check leaves the App running: stop it anyway.
	t.Cleanup(func() { _ = app.Stop(context.Background()) })

	const publishers = 4
	var wg sync.WaitGroup
	errs := make(chan error, publishers+2)
	for p := range publishers {
		goPublish(ctx, app, &wg, errs, p, publishers, n)
	}
	var answered atomic.Int64
	for c := range 2 {
		wg.Go(func() {
			for i := c; i < nreq; i += 2 {
				if err := echoed(ctx, app, i); err != nil {
					errs <- err
					return
				}
				answered.Add(1)
			}
		})
	}
	progress := seen.distinct
	for i, which := range plan {
		require.Eventually(t, func() bool { return progress() >= (i+1)*n/(len(plan)+2) }, 60*time.Second, time.Millisecond)
		crash(ctx, app, which)
	}
	noErrors(t, &wg, errs)
	require.Eventually(t, func() bool { return progress() == n }, 30*time.Second, time.Millisecond, "every published message handled")
	require.EqualValues(t, nreq, answered.Load())
	t.Logf("published %d, lost %d, duplicates %d, requests answered %d", n, n-progress(), seen.duplicates(), answered.Load())
	return app, ctx, seen
}

// While 10,000 messages are published and 2,000 requests answered on the
// in-process broker, the publisher panics twice and the replies publisher
// once: no publish fails or is lost (the senders protoactor stops hand
// their waiting publishes back to the next incarnation), duplicates are
// counted, the tree shows the restarts, and Stop leaves no goroutine.
func TestPublisherRestartMidStream(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	app, ctx, _ := midStream(t, inproc.New(), sys, "publisher-restarts", []string{"publisher", "replies", "publisher"},
		func(ctx context.Context, app *amqpactor.App, which string) {
			tree, err := app.Tree(ctx)
			require.NoError(t, err)
			node := find(tree, "publisher", "")
			require.NotNil(t, node, "no publisher node")
			if which == "replies" {
				node = node.Children[len(node.Children)-1]
				require.Equal(t, "replies", node.Name)
			}
			sys.Root.Send(node.ActorPID(), &testhook.Crash{Reason: "test"})
		})
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	node := find(tree, "publisher", "")
	require.NotNil(t, node)
	require.EqualValues(t, 2, node.Counters["panics"], "the publisher node shows its restarts")
	require.Equal(t, 2, node.Restarts)
	require.NoError(t, app.Stop(ctx))
}

// While 10,000 messages are published, half of them in transactions of 10,
// on the in-process broker, the txn actor panics twice: every transaction
// commits (a Begin under way answers its caller itself; the next
// incarnation keeps the connection), every message is handled, the tree
// shows the restarts, and Stop leaves no goroutine.
func TestTxnRestartMidStream(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName("txn-restarts"))
	const n, batch = 10000, 10
	seen := newTally(n)
	_, err := app.Subscribe(amqpactor.Queue("orders"), seen.handle)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	stopped := false
	defer func() {
		if !stopped {
			_ = app.Stop(ctx)
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	goPublish(ctx, app, &wg, errs, 0, 2, n) // the even ones, plainly
	wg.Go(func() {                          // the odd ones, in transactions
		for i := 1; i < n; i += 2 * batch {
			err := app.Transaction(ctx, func(tx *amqpactor.Tx) error {
				for j := i; j < i+2*batch && j < n; j += 2 {
					if err := tx.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte(strconv.Itoa(j))}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				errs <- fmt.Errorf("transaction from %d: %w", i, err)
				return
			}
		}
	})
	progress := seen.distinct
	const panics = 2
	for i := range panics {
		require.Eventually(t, func() bool { return progress() >= (i+1)*n/(panics+2) }, 60*time.Second, time.Millisecond)
		crashNode(t, ctx, sys, app, "txn", "")
	}
	noErrors(t, &wg, errs)
	require.Eventually(t, func() bool { return progress() == n }, 30*time.Second, time.Millisecond, "every published message handled")
	dups := seen.duplicates()
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	node := find(tree, "txn", "")
	require.NotNil(t, node)
	require.EqualValues(t, panics, node.Counters["panics"], "the txn node shows its restarts")
	require.Equal(t, panics, node.Restarts)
	t.Logf("published %d, lost %d, duplicates %d, transactions begun %d", n, n-progress(), dups, node.Counters["begun"])
	stopped = true
	require.NoError(t, app.Stop(ctx))
}

// While 10,000 messages are published to a subscription of the same App
// and 2,000 requests answered on the in-process broker, the connection
// actor panics three times: its siblings (the publisher, requests, txn and
// the subscriptions) are not its children, so they go on; the next
// incarnation keeps the connection and the subscriptions. No publish
// fails, nothing is lost, the tree shows the restarts, and Stop leaves no
// goroutine.
func TestConnectionRestartMidStream(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	broker := inproc.New()
	const panics = 3
	app, ctx, _ := midStream(t, broker, sys, "connection-restarts", make([]string, panics),
		func(ctx context.Context, app *amqpactor.App, _ string) {
			tree, err := app.Tree(ctx)
			require.NoError(t, err)
			require.Equal(t, "connection", tree.Kind)
			sys.Root.Send(tree.ActorPID(), &testhook.Crash{Reason: "test"})
		})
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	require.EqualValues(t, panics, tree.Counters["panics"], "the connection node shows its restarts")
	require.Equal(t, "attached", tree.State)
	require.Equal(t, 1, broker.Conns(), "the restarts kept the one connection")
	require.NoError(t, app.Stop(ctx))
}

// A connection actor that keeps panicking is given up on by its
// supervisor; the App's tree then stops, and Stop says so at once rather
// than waiting out its bound for a drain nobody answers.
func TestConnectionGivenUpStopsTheTree(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName("connection-given-up"),
		amqpactor.WithCloseTimeout(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	conn := tree.ActorPID()
	for range 11 { // actors.Supervisor restarts at most 10 a minute
		sys.Root.Send(conn, &testhook.Crash{Reason: "test"})
	}
	require.Eventually(t, func() bool {
		tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := app.Tree(tctx)
		return err != nil
	}, 10*time.Second, time.Millisecond, "the tree stops")
	stopped := make(chan error, 1)
	go func() { stopped <- app.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		require.ErrorContains(t, err, "had already stopped")
	case <-time.After(10 * time.Second):
		t.Fatal("Stop waited for a drain of a tree that had stopped")
	}
}
