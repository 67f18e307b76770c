package amqpactor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/internal/testhook"
)

// rootPID is the PID of app's root actor: the parent of the connection
// actor the tree is drawn from.
func rootPID(t *testing.T, app *amqpactor.App, ctx context.Context) *actor.PID {
	t.Helper()
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	conn := tree.ActorPID()
	require.True(t, strings.HasSuffix(conn.Id, "/connection"), conn.Id)
	return actor.NewPID(conn.Address, strings.TrimSuffix(conn.Id, "/connection"))
}

// decisions records the reasons a decider was asked about and answers
// with its directive.
type rootDecider struct {
	mu        sync.Mutex
	reasons   []string
	directive actor.Directive
}

func (d *rootDecider) decide(reason any) actor.Directive {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reasons = append(d.reasons, fmt.Sprint(reason))
	return d.directive
}

func (d *rootDecider) asked(substr string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, r := range d.reasons {
		if strings.Contains(r, substr) {
			n++
		}
	}
	return n
}

// startRootApp starts an App on sys with a subscription to "orders" that
// counts what it handles, under strategy (the default when nil).
func startRootApp(t *testing.T, sys *actor.ActorSystem, name string, strategy actor.SupervisorStrategy) (*amqpactor.App, *inproc.Broker, *atomic.Int64, context.Context) {
	t.Helper()
	broker := inproc.New()
	opts := []amqpactor.Option{amqpactor.WithActorSystem(sys), amqpactor.WithName(name),
		amqpactor.WithBackoff(5*time.Millisecond, 50*time.Millisecond)}
	if strategy != nil {
		opts = append(opts, amqpactor.WithSupervisorStrategy(strategy))
	}
	app := amqpactor.New(broker, opts...)
	var handled atomic.Int64
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(context.Context, *amqpactor.Message) error {
		handled.Add(1)
		return nil
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { _ = app.Stop(context.Background()) })
	return app, broker, &handled, ctx
}

// The root actor's panics are decided by the App's strategy: its decider is
// asked about each, and a Restart leaves the tree as it was (the root is
// resumed: a restart would stop every session and link of the App). The
// next message is handled, nothing is lost, nothing is reported, and Stop
// is quick.
func TestRootActorUnderTheAppStrategy(t *testing.T) {
	noLeaks(t)
	sys := sharedSystem(t)
	d := &rootDecider{directive: actor.RestartDirective}
	app, broker, handled, ctx := startRootApp(t, sys, "root-restart", actor.NewOneForOneStrategy(10, time.Minute, d.decide))
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("before")}))
	require.Eventually(t, func() bool { return handled.Load() == 1 }, 10*time.Second, time.Millisecond)
	before, err := app.Tree(ctx)
	require.NoError(t, err)
	root := rootPID(t, app, ctx)

	for i := range 3 {
		sys.Root.Send(root, &testhook.CrashRoot{Reason: fmt.Sprintf("root test %d", i)})
	}
	require.Eventually(t, func() bool { return d.asked("root test") == 3 }, 10*time.Second, time.Millisecond,
		"the App's decider was asked about the root's panics")

	const n = 100
	for i := range n {
		require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte(fmt.Sprint(i))}))
	}
	require.Eventually(t, func() bool { return handled.Load() == n+1 }, 10*time.Second, time.Millisecond,
		"handled %d of %d", handled.Load(), n+1)
	require.Zero(t, broker.QueueDepth("orders"))
	require.NoError(t, app.Health())
	after, err := app.Tree(ctx)
	require.NoError(t, err)
	require.Equal(t, before.ActorPID().Id, after.ActorPID().Id, "the same connection actor")
	require.Equal(t, "attached", find(after, "subscription", "orders").State, "the subscription kept")
	require.Zero(t, find(after, "subscription", "orders").Restarts, "nothing under the root was restarted")
	t0 := time.Now()
	require.NoError(t, app.Stop(ctx))
	require.Less(t, time.Since(t0), time.Second)
}

// Under the default strategy a panic of the root is survived: the tree is
// intact and the next message handled.
func TestRootActorCrashDefaultStrategy(t *testing.T) {
	noLeaks(t)
	sys := sharedSystem(t)
	app, _, handled, ctx := startRootApp(t, sys, "root-default", nil)
	root := rootPID(t, app, ctx)
	for range 3 {
		sys.Root.Send(root, &testhook.CrashRoot{Reason: "test"})
	}
	require.Eventually(t, func() bool {
		tree, err := app.Tree(ctx)
		require.NoError(t, err)
		return tree.Counters["root_panics"] == 3
	}, 10*time.Second, time.Millisecond, "the root's panics are counted on the tree's top")
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("after")}))
	require.Eventually(t, func() bool { return handled.Load() == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, app.Health())
	t0 := time.Now()
	require.NoError(t, app.Stop(ctx))
	require.Less(t, time.Since(t0), time.Second)
}

// A decider that answers Stop (or Escalate: there is nothing above the
// root) for the root's panic ends the App's tree: Health names the
// connection, a StateChange says failed, every call fails at once and Stop
// is quick.
func TestRootActorStoppedByTheAppStrategy(t *testing.T) {
	for _, dir := range []actor.Directive{actor.StopDirective, actor.EscalateDirective} {
		t.Run(dir.String(), func(t *testing.T) {
			noLeaks(t)
			sys := sharedSystem(t)
			d := &rootDecider{directive: dir}
			var failed atomic.Int64
			broker := inproc.New()
			app := amqpactor.New(broker, amqpactor.WithActorSystem(sys), amqpactor.WithName("root-"+dir.String()),
				amqpactor.WithSupervisorStrategy(actor.NewOneForOneStrategy(10, time.Minute, d.decide)),
				amqpactor.WithStateChanges(func(sc amqpactor.StateChange) {
					if sc.To == actors.StateFailed && sc.Kind == "connection" {
						failed.Add(1)
					}
				}))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			require.NoError(t, app.Start(ctx))
			t.Cleanup(func() { _ = app.Stop(context.Background()) })
			sys.Root.Send(rootPID(t, app, ctx), &testhook.CrashRoot{Reason: "root test"})
			require.Eventually(t, func() bool { return app.Health() != nil && failed.Load() > 0 }, 10*time.Second, time.Millisecond)
			require.Contains(t, app.Health().Error(), "root test")
			require.Equal(t, 1, d.asked("root test"))
			pctx, pcancel := context.WithTimeout(ctx, 8*time.Second)
			defer pcancel()
			t0 := time.Now()
			err := app.Publish(pctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("x")})
			require.ErrorIs(t, err, amqpactor.ErrStopped)
			var ne *amqpactor.NodeError
			require.True(t, errors.As(err, &ne), "%v", err)
			require.Less(t, time.Since(t0), time.Second)
			t0 = time.Now()
			_ = app.Stop(ctx)
			require.Less(t, time.Since(t0), time.Second)
		})
	}
}

// The Publisher actor is in the tree once it is used: drawn under the
// connection with its counters, a child protoactor knows.
func TestPublisherActorInTheTree(t *testing.T) {
	noLeaks(t)
	sys := sharedSystem(t)
	broker := inproc.New()
	broker.DeclareQueue("out")
	app, ctx := startActorApp(t, broker, sys, nil)
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	require.Nil(t, find(tree, "actor-publisher", ""), "not before it is asked for")

	publisher := app.Publisher()
	res, err := sys.Root.RequestFuture(publisher, &amqpactor.PublishRequest{Address: amqpactor.Queue("out"),
		Message: &amqpactor.Message{Body: []byte("x")}}, 5*time.Second).Result()
	require.NoError(t, err)
	require.NoError(t, res.(*amqpactor.PublishResult).Err)
	require.Eventually(t, func() bool {
		tree, err = app.Tree(ctx)
		require.NoError(t, err)
		n := find(tree, "actor-publisher", "")
		return n != nil && n.Counters["published"] == 1
	}, 5*time.Second, time.Millisecond)
	n := find(tree, "actor-publisher", "")
	require.Equal(t, "attached", n.State)
	require.True(t, strings.HasPrefix(n.ActorPID().Id, tree.ActorPID().Id+"/"), "%s is a child of the connection %s", n.PID, tree.PID)
	_, alive := sys.ProcessRegistry.GetLocal(n.ActorPID().Id)
	require.True(t, alive)
	require.Equal(t, 1, broker.QueueDepth("out"))
}

// The Publisher actor crashed 12 times, 20 ms apart, under the default
// strategy and a 3-a-minute one: a publish through it is answered (never
// waiting out its context) and lands, or the App reports the actor failed.
// Stop is quick.
func TestPublisherActorCrashedTwelveTimes(t *testing.T) {
	for _, sname := range []string{"default", "3-per-minute"} {
		t.Run(sname, func(t *testing.T) {
			noLeaks(t)
			sys := sharedSystem(t)
			broker := inproc.New()
			broker.DeclareQueue("out")
			opts := []amqpactor.Option{amqpactor.WithActorSystem(sys), amqpactor.WithName("pub12-" + sname)}
			if sname != "default" {
				opts = append(opts, amqpactor.WithSupervisorStrategy(actor.NewOneForOneStrategy(3, time.Minute, actor.DefaultDecider)))
			}
			app := amqpactor.New(broker, opts...)
			publisher := app.Publisher()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			require.NoError(t, app.Start(ctx))
			stopped := false
			defer func() {
				if !stopped {
					_ = app.Stop(context.Background())
				}
			}()
			ask := func() error {
				res, err := sys.Root.RequestFuture(publisher, &amqpactor.PublishRequest{Address: amqpactor.Queue("out"),
					Message: &amqpactor.Message{Body: []byte("x")}}, 8*time.Second).Result()
				if err != nil {
					return err
				}
				return res.(*amqpactor.PublishResult).Err
			}
			require.NoError(t, ask())
			require.Eventually(t, func() bool {
				tree, err := app.Tree(ctx)
				return err == nil && find(tree, "actor-publisher", "") != nil
			}, 5*time.Second, time.Millisecond)
			for range 12 {
				sys.Root.Send(publisher, &testhook.Crash{Reason: "test"})
				time.Sleep(20 * time.Millisecond) // the pace of the crash matrix; nothing is awaited
			}
			t0 := time.Now()
			err := ask()
			require.False(t, errors.Is(err, actor.ErrTimeout), "a publish through the Publisher waited out its bound")
			require.Less(t, time.Since(t0), 5*time.Second)
			if err == nil {
				require.Equal(t, 2, broker.QueueDepth("out"))
				require.NoError(t, app.Health())
				tree, terr := app.Tree(ctx)
				require.NoError(t, terr)
				n := find(tree, "actor-publisher", "")
				require.NotNil(t, n)
				_, alive := sys.ProcessRegistry.GetLocal(n.ActorPID().Id)
				require.True(t, alive, "the tree draws a dead actor-publisher")
				require.Positive(t, n.Restarts)
				t.Logf("works: the actor-publisher restarted %d times, published %d", n.Restarts, n.Counters["published"])
			} else {
				t.Logf("reported: %v (publish: %v)", app.Health(), err)
				require.ErrorIs(t, app.Health(), amqpactor.ErrUnhealthy)
				require.Contains(t, app.Health().Error(), "actor-publisher")
			}
			stopped = true
			t0 = time.Now()
			require.NoError(t, app.Stop(ctx))
			require.Less(t, time.Since(t0), time.Second)
		})
	}
}

// A Publisher actor its strategy stops on every crash is started again
// within its budget; past it the App reports it (Health names it, a
// StateChange says failed), and a publish through the Publisher's PID is
// still answered at once.
func TestPublisherActorPastItsBudgetIsReported(t *testing.T) {
	noLeaks(t)
	sys := sharedSystem(t)
	broker := inproc.New()
	broker.DeclareQueue("out")
	var failed atomic.Int64
	app := amqpactor.New(broker, amqpactor.WithActorSystem(sys), amqpactor.WithName("pub-budget"),
		amqpactor.WithSupervisorStrategy(actor.NewOneForOneStrategy(10, time.Minute, func(any) actor.Directive { return actor.StopDirective })),
		amqpactor.WithStateChanges(func(sc amqpactor.StateChange) {
			if sc.To == actors.StateFailed && sc.Kind == "actor-publisher" {
				failed.Add(1)
			}
		}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { _ = app.Stop(context.Background()) })
	publisher := app.Publisher()
	node := func() *amqpactor.Node {
		tree, err := app.Tree(ctx)
		require.NoError(t, err)
		return find(tree, "actor-publisher", "")
	}
	require.Eventually(t, func() bool { return node() != nil }, 5*time.Second, time.Millisecond)
	for i := 1; failed.Load() == 0; i++ {
		require.LessOrEqual(t, i, 20, "never reported")
		sys.Root.Send(publisher, &testhook.Crash{Reason: "test"})
		require.Eventually(t, func() bool {
			n := node()
			return failed.Load() > 0 || n != nil && n.Restarts == i
		}, 5*time.Second, time.Millisecond)
	}
	require.ErrorIs(t, app.Health(), amqpactor.ErrUnhealthy)
	require.Contains(t, app.Health().Error(), "actor-publisher")
	require.Equal(t, "failed", node().State)
	t0 := time.Now()
	res, err := sys.Root.RequestFuture(publisher, &amqpactor.PublishRequest{Address: amqpactor.Queue("out"),
		Message: &amqpactor.Message{Body: []byte("x")}}, 8*time.Second).Result()
	require.NoError(t, err)
	require.NoError(t, res.(*amqpactor.PublishResult).Err)
	require.Less(t, time.Since(t0), time.Second)
	t0 = time.Now()
	require.NoError(t, app.Stop(ctx))
	require.Less(t, time.Since(t0), time.Second)
}
