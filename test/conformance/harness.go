package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/inproc"
)

// Bounds of every wait in the suite. Nothing waits without one.
const (
	// waitFor bounds each wait for something that must happen.
	waitFor = 10 * time.Second
	// tick is the polling interval of require.Eventually.
	tick = 2 * time.Millisecond
	// quiet is the window of a negative assertion (something must not
	// happen) where no event can prove it instead. Only live brokers need
	// it: with FaultHooks the suite reads the broker's state.
	quiet = 150 * time.Millisecond
	// testBound bounds the context of one test.
	testBound = 45 * time.Second
)

// env is one test: its connector, its context and what it must clean up.
type env struct {
	*testing.T
	f   Factory
	c   amqpactor.Connector
	ctx context.Context

	mu    sync.Mutex
	gates []*gate
	// subs are the topic subscriptions made, deleted when the test ends.
	subs []*amqpactor.Subscription
}

func newEnv(t *testing.T, f Factory) *env {
	ctx, cancel := context.WithTimeout(background, testBound)
	t.Cleanup(cancel)
	c := f.New(t)
	require.NotNil(t, c, "Factory.New returned nil")
	e := &env{T: t, f: f, c: c, ctx: ctx}
	if f.DeleteSubscription != nil {
		// Registered before any App, so it runs after every App stopped:
		// a running subscriber would declare its node again.
		t.Cleanup(func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			for _, s := range e.subs {
				if err := f.DeleteSubscription(s.Address(), s.Name()); err != nil {
					t.Logf("deleting the subscription %s of %s: %v", s.Name(), s.Address(), err)
				}
			}
		})
	}
	return e
}

// stream names a stream of the test's own, deleted (Factory.DeleteStream)
// once the Apps made after it have stopped.
func (e *env) stream(base string) amqpactor.Address {
	name := e.unique(base)
	if del := e.f.DeleteStream; del != nil {
		e.Cleanup(func() {
			if err := del(name); err != nil {
				e.Logf("deleting the stream %s: %v", name, err)
			}
		})
	}
	return amqpactor.Stream(name)
}

// unique makes a name no other test or run uses.
func (e *env) unique(base string) string {
	if e.f.Unique != nil {
		return e.f.Unique(e.T, base)
	}
	return base + "-" + randomSuffix()
}

func (e *env) queue(base string) amqpactor.Address { return amqpactor.Queue(e.unique(base)) }
func (e *env) topic(base string) amqpactor.Address { return amqpactor.Topic(e.unique(base)) }

// newApp returns an App on the test's connector, stopped (bounded) when the
// test ends; a Stop error fails the test. Backoff is short so re-attach
// tests are fast.
func (e *env) newApp(opts ...amqpactor.Option) *amqpactor.App {
	return e.newAppOn(e.c, opts...)
}

func (e *env) newAppOn(c amqpactor.Connector, opts ...amqpactor.Option) *amqpactor.App {
	all := append([]amqpactor.Option{
		amqpactor.WithBackoff(5*time.Millisecond, 100*time.Millisecond),
		amqpactor.WithName(e.unique("app")),
	}, opts...)
	app := amqpactor.New(c, all...)
	e.Cleanup(func() {
		// Handlers that wait for a gate must not hold the stop up.
		e.openGates()
		ctx, cancel := context.WithTimeout(background, waitFor)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			e.Errorf("stopping the app: %v", err)
		}
	})
	return app
}

func (e *env) start(app *amqpactor.App) {
	e.Helper()
	require.NoError(e, app.Start(e.ctx), "Start")
}

func (e *env) startedApp(opts ...amqpactor.Option) *amqpactor.App {
	e.Helper()
	app := e.newApp(opts...)
	e.start(app)
	return app
}

// stop stops app now, bounded, and requires a clean stop.
func (e *env) stop(app *amqpactor.App) {
	e.Helper()
	ctx, cancel := context.WithTimeout(background, waitFor)
	defer cancel()
	require.NoError(e, app.Stop(ctx), "Stop")
}

func (e *env) subscribe(app *amqpactor.App, a amqpactor.Address, h amqpactor.Handler, opts ...amqpactor.SubscribeOption) *amqpactor.Subscription {
	e.Helper()
	sub, err := app.Subscribe(a, h, opts...)
	require.NoError(e, err, "Subscribe %s", a)
	if a.Kind() == address.KindTopic {
		e.mu.Lock()
		e.subs = append(e.subs, sub)
		e.mu.Unlock()
	}
	return sub
}

func (e *env) publish(app *amqpactor.App, a amqpactor.Address, m *amqpactor.Message, opts ...amqpactor.PublishOption) {
	e.Helper()
	require.NoError(e, app.Publish(e.ctx, a, m, opts...), "Publish to %s", a)
}

// eventually waits, bounded, for cond.
func (e *env) eventually(cond func() bool, format string, args ...any) {
	e.Helper()
	require.Eventually(e, cond, waitFor, tick, append([]any{format}, args...)...)
}

// hooks returns the in-process broker when the factory has FaultHooks.
func (e *env) hooks() (*inproc.Broker, bool) {
	if !e.f.Features.FaultHooks {
		return nil, false
	}
	b, ok := e.c.(*inproc.Broker)
	if !ok {
		e.Fatalf("Features.FaultHooks is set but Factory.New returned a %T, not an *inproc.Broker", e.c)
	}
	return b, true
}

// needHooks skips a test that needs a fault only the in-process broker
// makes on demand.
func (e *env) needHooks() *inproc.Broker {
	e.Helper()
	b, ok := e.hooks()
	if !ok {
		e.Skipf("%s: needs Features.FaultHooks (a fault the broker cannot be made to produce on demand)", e.f.Name)
	}
	return b
}

// gate blocks handlers until the test opens it; every gate opens before the
// test's Apps stop, so no handler outlives its test.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func (e *env) gate() *gate {
	g := &gate{ch: make(chan struct{})}
	e.mu.Lock()
	e.gates = append(e.gates, g)
	e.mu.Unlock()
	return g
}

func (e *env) openGates() {
	e.mu.Lock()
	gs := append([]*gate(nil), e.gates...)
	e.mu.Unlock()
	for _, g := range gs {
		g.open()
	}
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// wait blocks until the gate opens, at most waitFor; it reports whether it
// opened.
func (g *gate) wait() bool {
	t := time.NewTimer(waitFor)
	defer t.Stop()
	select {
	case <-g.ch:
		return true
	case <-t.C:
		return false
	}
}

func (g *gate) isOpen() bool {
	select {
	case <-g.ch:
		return true
	default:
		return false
	}
}

// await waits, bounded, for g to open.
func (e *env) await(g *gate, what string) {
	e.Helper()
	if !g.wait() {
		e.Fatalf("timed out after %v waiting for %s", waitFor, what)
	}
}

// seen is one handler call.
type seen struct {
	who string
	m   *amqpactor.Message
	at  int // position in the recorder, over all handlers
}

// recorder collects handler calls; safe for concurrent use.
type recorder struct {
	mu    sync.Mutex
	calls []seen
}

func (r *recorder) add(who string, m *amqpactor.Message) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, seen{who: who, m: m, at: len(r.calls)})
	return len(r.calls)
}

func (r *recorder) n() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func idKey(id any) string { return fmt.Sprintf("%T:%v", id, id) }

// of returns the calls for the message with that message-id, in order.
func (r *recorder) of(id any) []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []seen
	k := idKey(id)
	for _, c := range r.calls {
		if idKey(c.m.MessageID) == k {
			out = append(out, c)
		}
	}
	return out
}

func (r *recorder) count(id any) int { return len(r.of(id)) }

// by counts the calls of one handler.
func (r *recorder) by(who string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.who == who {
			n++
		}
	}
	return n
}

// distinct counts the distinct message-ids seen.
func (r *recorder) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := map[string]bool{}
	for _, c := range r.calls {
		ids[idKey(c.m.MessageID)] = true
	}
	return len(ids)
}

// requireEachOnce checks that every id was handled exactly once and nothing
// else was handled.
func (e *env) requireEachOnce(r *recorder, ids []string) {
	e.Helper()
	for _, id := range ids {
		require.Equal(e, 1, r.count(id), "handler calls for %s", id)
	}
	require.Equal(e, len(ids), r.n(), "handler calls in total")
}

// failing is a handler that records each call and fails the message with
// message-id id, every time.
func (r *recorder) failing(id string) amqpactor.Handler {
	return func(ctx context.Context, m *amqpactor.Message) error {
		r.add("h", m)
		if m.MessageID == id {
			return errors.New("always fails")
		}
		return nil
	}
}

// hasAll reports whether every one of ids was handled at least once.
func (r *recorder) hasAll(ids []string) bool {
	for _, id := range ids {
		if r.count(id) == 0 {
			return false
		}
	}
	return true
}

// onceEach checks that each of ids was handled exactly once.
func (e *env) onceEach(r *recorder, ids []string) {
	e.Helper()
	for _, id := range ids {
		require.Equal(e, 1, r.count(id), "calls for %s", id)
	}
}

// failedInPartitions adds up the partitions' failed counters of app's tree.
func (e *env) failedInPartitions(app *amqpactor.App) uint64 {
	e.Helper()
	var failed uint64
	for _, p := range ofKind(e.tree(app), "partition") {
		failed += p.Counters["failed"]
	}
	return failed
}

// publishIDs publishes msg(id) for each of ids, in order.
func (e *env) publishIDs(app *amqpactor.App, a amqpactor.Address, ids []string) {
	e.Helper()
	for _, id := range ids {
		e.publish(app, a, msg(id))
	}
}

// publishHalves publishes each messages ("p<publisher>-<seq>") from each of
// publishers goroutines, the second half of each only once mid opens. The
// gate returned opens once every one has returned; by then errs holds what
// their publishes returned, and is closed.
func (e *env) publishHalves(app *amqpactor.App, q amqpactor.Address, publishers, each int, mid *gate) (finished *gate, errs <-chan error) {
	ch := make(chan error, publishers*each)
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for i := range each {
				if i == each/2 && !mid.wait() {
					ch <- errors.New("the second half never started")
					return
				}
				if err := app.Publish(e.ctx, q, msg(fmt.Sprintf("p%d-%03d", p, i))); err != nil {
					ch <- err
				}
			}
		})
	}
	finished = e.gate()
	go func() {
		wg.Wait()
		close(ch)
		finished.open()
	}()
	return finished, ch
}

// publishInterleaved publishes perGroup messages of each of groups groups
// (message-id g<group>-<seq>, group-id <prefix><group>, group-sequence
// from 1) in a fixed random interleaving, seeded by seed, that keeps each
// group's own order.
func (e *env) publishInterleaved(app *amqpactor.App, q amqpactor.Address, groups, perGroup int, prefix string, seed [2]uint64) {
	e.Helper()
	rng := rand.New(rand.NewPCG(seed[0], seed[1]))
	next := make([]int, groups)
	for range groups * perGroup {
		g := rng.IntN(groups)
		for next[g] == perGroup {
			g = (g + 1) % groups
		}
		next[g]++
		e.publish(app, q, &amqpactor.Message{
			MessageID:     fmt.Sprintf("g%d-%d", g, next[g]),
			GroupID:       fmt.Sprintf("%s%d", prefix, g),
			GroupSequence: uint32(next[g]),
			Body:          []byte("x"),
		})
	}
}

// drained waits until the in-process broker holds nothing of q: no
// delivery unsettled, nothing on the queue.
func (e *env) drained(b *inproc.Broker, q amqpactor.Address) {
	e.Helper()
	e.eventually(func() bool { return b.Unsettled(q.Name()) == 0 && b.QueueDepth(q.Name()) == 0 }, "nothing left on the broker")
}

// attached reports whether every node of these kinds in app's tree is
// attached (false while the tree does not answer).
func attached(app *amqpactor.App, kinds ...string) bool {
	root, err := treeOf(app)
	if err != nil {
		return false
	}
	for _, kind := range kinds {
		for _, n := range ofKind(root, kind) {
			if n.State != "attached" {
				return false
			}
		}
	}
	return true
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

func msg(id string) *amqpactor.Message {
	return &amqpactor.Message{MessageID: id, Body: []byte("body of " + id)}
}

// ---- the actor tree ----

func (e *env) tree(app *amqpactor.App) *amqpactor.Node {
	e.Helper()
	n, err := treeOf(app)
	require.NoError(e, err, "Tree")
	return n
}

func treeOf(app *amqpactor.App) (*amqpactor.Node, error) {
	ctx, cancel := context.WithTimeout(background, 5*time.Second)
	defer cancel()
	return app.Tree(ctx)
}

func walk(n *amqpactor.Node, fn func(*amqpactor.Node)) {
	if n == nil {
		return
	}
	fn(n)
	for _, c := range n.Children {
		walk(c, fn)
	}
}

func ofKind(n *amqpactor.Node, kind string) []*amqpactor.Node {
	var out []*amqpactor.Node
	walk(n, func(x *amqpactor.Node) {
		if x.Kind == kind {
			out = append(out, x)
		}
	})
	return out
}

func childrenOf(n *amqpactor.Node, kind string) []*amqpactor.Node {
	var out []*amqpactor.Node
	for _, c := range n.Children {
		if c.Kind == kind {
			out = append(out, c)
		}
	}
	return out
}

// subNode finds the subscription's node: it is named after the
// subscription.
func subNode(root *amqpactor.Node, sub *amqpactor.Subscription) *amqpactor.Node {
	for _, n := range ofKind(root, "subscription") {
		if n.Name == "subscription:"+sub.Name() {
			return n
		}
	}
	return nil
}

// receiverOf returns the receiver node of sub, or nil.
func receiverOf(root *amqpactor.Node, sub *amqpactor.Subscription) *amqpactor.Node {
	s := subNode(root, sub)
	if s == nil {
		return nil
	}
	rs := childrenOf(s, "receiver")
	if len(rs) != 1 {
		return nil
	}
	return rs[0]
}

// counters returns the counters of sub's receiver (nil when it has none
// right now, e.g. while re-attaching).
func counters(app *amqpactor.App, sub *amqpactor.Subscription) map[string]uint64 {
	root, err := treeOf(app)
	if err != nil {
		return nil
	}
	if r := receiverOf(root, sub); r != nil {
		return r.Counters
	}
	return nil
}

// countersAre reports whether sub's receiver counters have at least the
// given values (used in eventually).
func countersAre(app *amqpactor.App, sub *amqpactor.Subscription, want map[string]uint64) bool {
	c := counters(app, sub)
	if c == nil {
		return false
	}
	for k, v := range want {
		if c[k] != v {
			return false
		}
	}
	return true
}

func treeText(n *amqpactor.Node) string {
	var b strings.Builder
	var rec func(n *amqpactor.Node, depth int)
	rec = func(n *amqpactor.Node, depth int) {
		fmt.Fprintf(&b, "%s%s [%s] %s %s %v\n", strings.Repeat("  ", depth), n.Name, n.Kind, n.Address, n.State, n.Counters)
		for _, c := range n.Children {
			rec(c, depth+1)
		}
	}
	rec(n, 0)
	return b.String()
}

// firstAcquirer asserts m's first-acquirer: first says whether m is its
// message's first delivery. A broker that passes the sender's value on
// (our publisher sends false) is asserted to do just that.
func (e *env) firstAcquirer(m *amqpactor.Message, first bool, what string, args ...any) {
	e.Helper()
	if e.f.Features.FirstAcquirerAsSent {
		first = false
	}
	require.Equal(e, first, m.FirstAcquirer, append([]any{"first-acquirer: " + what}, args...)...)
}
