package amqpactor_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// changes records state changes by node path, in the order they came.
type changes struct {
	mu     sync.Mutex
	byPath map[string][]amqpactor.StateChange
}

func newChanges() *changes { return &changes{byPath: map[string][]amqpactor.StateChange{}} }

func (c *changes) add(sc amqpactor.StateChange) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byPath[sc.Path] = append(c.byPath[sc.Path], sc)
}

// of returns a copy of what path went through.
func (c *changes) of(path string) []amqpactor.StateChange {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.byPath[path])
}

// marks returns how many changes each path has had so far.
func (c *changes) marks() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]int{}
	for p, cs := range c.byPath {
		m[p] = len(cs)
	}
	return m
}

func (c *changes) paths() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ps []string
	for p := range c.byPath {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

func states(cs []amqpactor.StateChange) string {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s→%s", c.From, c.To)
	}
	return b.String()
}

// attached reports whether path's last state is attached.
func (c *changes) attached(path string) bool {
	cs := c.of(path)
	return len(cs) > 0 && cs[len(cs)-1].To == "attached"
}

// recovered reports whether path, after its first `from` changes, went
// down (detached, restarting, or stopped for a node that a new incarnation
// replaces) and then attached again.
func (c *changes) recovered(path string, from int) bool {
	cs := c.of(path)
	if from > len(cs) {
		return false
	}
	down := false
	for _, sc := range cs[from:] {
		switch sc.To {
		case "detached", "restarting", "stopped":
			down = true
		case "attached":
			if down {
				return true
			}
		}
	}
	return false
}

// chained checks that path's changes follow each other: each one starts
// where the last ended (or, for a node replaced by a new incarnation, after
// stopped, from nothing). A change lost or out of order breaks the chain.
func chained(t *testing.T, who, path string, cs []amqpactor.StateChange) {
	t.Helper()
	prev := ""
	for i, sc := range cs {
		require.Equal(t, path, sc.Path)
		require.False(t, sc.At.IsZero(), "%s %s: change %d has no time", who, path, i)
		ok := sc.From == prev || (sc.From == "" && prev == "stopped")
		require.True(t, ok, "%s %s: change %d (%s→%s) does not follow %q: %s", who, path, i, sc.From, sc.To, prev, states(cs))
		prev = sc.To
	}
}

const (
	evSub      = "connection/subscription:orders-sub"
	evReceiver = evSub + "/receiver"
	evSender   = "connection/publisher/sender:orders"
)

// evNodes are the nodes a fault on the orders queue affects.
var evNodes = []string{"connection", "connection/publisher", evSub, evReceiver, evSender}

// eventApp is an App on the in-process broker whose state changes are
// recorded twice: from its actor system's EventStream and from
// WithStateChanges. It publishes to and consumes from "orders".
// Each setup runs on the App before it starts.
func eventApp(t *testing.T, sys *actor.ActorSystem, setup ...func(*amqpactor.App)) (*amqpactor.App, *inproc.Broker, *changes, *changes, func()) {
	t.Helper()
	fromStream, fromOption := newChanges(), newChanges()
	sub := sys.EventStream.Subscribe(func(evt any) {
		if sc, ok := evt.(*amqpactor.StateChange); ok {
			fromStream.add(*sc)
		}
	})
	b := inproc.New()
	app := amqpactor.New(b, amqpactor.WithActorSystem(sys), amqpactor.WithName("events"),
		amqpactor.WithBackoff(5*time.Millisecond, 50*time.Millisecond),
		amqpactor.WithStateChanges(fromOption.add))
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(ctx context.Context, m *amqpactor.Message) error { return nil },
		amqpactor.WithSubscriptionName("orders-sub"))
	require.NoError(t, err)
	for _, f := range setup {
		f(app)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("x")}))
	for _, rec := range []*changes{fromStream, fromOption} {
		require.Eventually(t, func() bool {
			for _, p := range evNodes {
				if !rec.attached(p) {
					return false
				}
			}
			return true
		}, 10*time.Second, 5*time.Millisecond, "every node attached: %v", rec.paths())
	}
	unsubscribe := func() { sys.EventStream.Unsubscribe(sub) }
	return app, b, fromStream, fromOption, unsubscribe
}

func stopApp(t *testing.T, app *amqpactor.App) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Stop(ctx))
}

func newSystem(t *testing.T) *actor.ActorSystem {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	t.Cleanup(sys.Shutdown)
	return sys
}

func TestStateChangesOnDetachLinks(t *testing.T) {
	app, b, fromStream, fromOption, unsubscribe := eventApp(t, newSystem(t))
	defer unsubscribe()
	defer stopApp(t, app)
	marks := [2]map[string]int{fromStream.marks(), fromOption.marks()}

	require.Equal(t, 2, b.DetachLinks(amqpactor.Queue("orders"), "amqp:link:detach-forced", "test"))
	// A sender with nothing to send re-attaches on the next publish.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("y")}))

	for i, rec := range []*changes{fromStream, fromOption} {
		for _, p := range []string{evReceiver, evSender} {
			require.Eventually(t, func() bool { return rec.recovered(p, marks[i][p]) }, 10*time.Second, 5*time.Millisecond,
				"%s: %s", p, states(rec.of(p)))
		}
	}
	// Only the links went: the connection and the sessions did not change.
	for i, rec := range []*changes{fromStream, fromOption} {
		for _, p := range []string{"connection", "connection/publisher", evSub} {
			require.Len(t, rec.of(p), marks[i][p], "%s: %s", p, states(rec.of(p)))
		}
	}
	for _, p := range evNodes {
		chained(t, "EventStream", p, fromStream.of(p))
		chained(t, "WithStateChanges", p, fromOption.of(p))
		require.Equal(t, states(fromStream.of(p)), states(fromOption.of(p)), p)
	}
	// A receiver's link error says why it went.
	var why error
	for _, sc := range fromOption.of(evReceiver)[marks[1][evReceiver]:] {
		if sc.To == "restarting" || sc.To == "detached" {
			why = sc.Err
			break
		}
	}
	require.ErrorContains(t, why, "detach-forced")
}

func TestStateChangesOnDropConnections(t *testing.T) {
	app, b, fromStream, fromOption, unsubscribe := eventApp(t, newSystem(t))
	defer unsubscribe()
	defer stopApp(t, app)
	marks := [2]map[string]int{fromStream.marks(), fromOption.marks()}

	require.Equal(t, 1, b.DropConnections(nil))
	for i, rec := range []*changes{fromStream, fromOption} {
		for _, p := range evNodes {
			require.Eventually(t, func() bool { return rec.recovered(p, marks[i][p]) }, 10*time.Second, 5*time.Millisecond,
				"%s: %s", p, states(rec.of(p)))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("y")}))
	for _, p := range evNodes {
		chained(t, "EventStream", p, fromStream.of(p))
		chained(t, "WithStateChanges", p, fromOption.of(p))
	}
	// The connection went restarting with the reason, and came back.
	cs := fromOption.of("connection")[marks[1]["connection"]:]
	require.Equal(t, "restarting", cs[0].To, states(cs))
	require.ErrorContains(t, cs[0].Err, "connection")
}

func TestStateChangesOnEndSessions(t *testing.T) {
	const evRequests = "connection/requests"
	rpc := amqpactor.Queue("rpc")
	app, b, fromStream, fromOption, unsubscribe := eventApp(t, newSystem(t), func(app *amqpactor.App) {
		_, err := app.Subscribe(rpc, amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
			return &amqpactor.Message{Body: req.Body}, nil
		}), amqpactor.WithSubscriptionName("rpc-sub"))
		require.NoError(t, err)
	})
	defer unsubscribe()
	defer stopApp(t, app)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The requests actor attaches its reply link on the first request.
	_, err := app.Request(ctx, rpc, &amqpactor.Message{Body: []byte("before")})
	require.NoError(t, err)
	nodes := append(slices.Clone(evNodes), evRequests, "connection/subscription:rpc-sub", "connection/subscription:rpc-sub/receiver")
	for _, rec := range []*changes{fromStream, fromOption} {
		require.Eventually(t, func() bool { return rec.attached(evRequests) }, 10*time.Second, 5*time.Millisecond,
			"%s: %s", evRequests, states(rec.of(evRequests)))
	}
	marks := [2]map[string]int{fromStream.marks(), fromOption.marks()}

	// Every session ends; the connection stays.
	require.GreaterOrEqual(t, b.EndSessions(amqpactor.Address{}, "amqp:internal-error", "test end sessions"), 3)
	// A sender with nothing to send, and the requests actor, re-attach on
	// the next publish and request. A request in flight when its reply
	// link ended fails by design: the next one attaches anew.
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("y")}))
	require.Eventually(t, func() bool {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		_, err := app.Request(rctx, rpc, &amqpactor.Message{Body: []byte("after")})
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "a request after the sessions ended")

	for i, rec := range []*changes{fromStream, fromOption} {
		for _, p := range nodes[1:] {
			require.Eventually(t, func() bool { return rec.recovered(p, marks[i][p]) }, 10*time.Second, 5*time.Millisecond,
				"%s: %s", p, states(rec.of(p)))
		}
		// The connection did not change.
		require.Len(t, rec.of("connection"), marks[i]["connection"], states(rec.of("connection")))
	}
	for _, p := range nodes {
		chained(t, "EventStream", p, fromStream.of(p))
		chained(t, "WithStateChanges", p, fromOption.of(p))
		require.Equal(t, states(fromStream.of(p)), states(fromOption.of(p)), p)
	}
}

func TestStateChangesStopEveryNode(t *testing.T) {
	sys := newSystem(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), ignoreThrottle)
	app, _, fromStream, fromOption, unsubscribe := eventApp(t, sys)
	defer unsubscribe()
	// Every node of the tree has had a change by now.
	tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tree, err := app.Tree(tctx)
	require.NoError(t, err)
	var inTree []string
	var walk func(prefix string, n *amqpactor.Node)
	walk = func(prefix string, n *amqpactor.Node) {
		p := prefix + n.Name
		if n.State != "" && n.Kind != "dispatcher" && n.Kind != "partition" && n.Kind != "txn" {
			inTree = append(inTree, p)
		}
		for _, c := range n.Children {
			walk(p+"/", c)
		}
	}
	walk("", tree)
	for _, p := range evNodes {
		require.Contains(t, inTree, p)
	}

	stopApp(t, app)
	// Stop returns once every change has been delivered: no waiting here.
	for _, rec := range []*changes{fromStream, fromOption} {
		for _, p := range inTree {
			cs := rec.of(p)
			require.NotEmpty(t, cs, p)
			require.Equal(t, "stopped", cs[len(cs)-1].To, "%s: %s", p, states(cs))
			chained(t, "", p, cs)
		}
	}
	require.Zero(t, app.DroppedStateChanges())
}

func TestWatchStateChangesBeforeStart(t *testing.T) {
	app := amqpactor.New(inproc.New(), amqpactor.WithBackoff(5*time.Millisecond, 50*time.Millisecond))
	got := newChanges()
	stop := app.WatchStateChanges(got.add)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	require.Eventually(t, func() bool { return got.attached("connection") }, 10*time.Second, 5*time.Millisecond)
	stop()
	n := len(got.of("connection"))
	stopApp(t, app)
	require.Len(t, got.of("connection"), n, "no change after the watch stopped")
	amqpactor.New(nil).WatchStateChanges(nil)() // a nil function is a no-op
}
