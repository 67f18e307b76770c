package amqpactor_test

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/internal/testhook"
)

// crashUntilFailed crashes the actor at pid (whichever incarnation holds
// the name) every few milliseconds until a StateChange says path failed.
func crashUntilFailed(t *testing.T, sys *actor.ActorSystem, pid *actor.PID, path string, failed <-chan amqpactor.StateChange) amqpactor.StateChange {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	bound := time.After(30 * time.Second)
	for {
		select {
		case sc := <-failed:
			if sc.Path == path {
				return sc
			}
		case <-tick.C:
			sys.Root.Send(pid, &testhook.Crash{Reason: "test: a fault on every start"})
		case <-bound:
			t.Fatalf("%s never failed", path)
		}
	}
}

// drawnHonestly requires that every node of tree is alive in protoactor's
// registry or drawn failed, and returns how many of each it saw.
func drawnHonestly(t *testing.T, sys *actor.ActorSystem, n *amqpactor.Node) (alive, failed int) {
	t.Helper()
	if n.State == actors.StateFailed {
		failed++
	} else {
		_, ok := sys.ProcessRegistry.GetLocal(n.ActorPID().Id)
		require.True(t, ok, "the tree draws %s (%s) %q, but its actor is gone", n.Name, n.PID, n.State)
		alive++
	}
	for _, c := range n.Children {
		a, f := drawnHonestly(t, sys, c)
		alive, failed = alive+a, failed+f
	}
	return alive, failed
}

// The publisher, requests and txn actors are started again when their
// supervisor stops them, within a budget: a fault that recurs on every
// start ends in a failed node (a StateChange, Health names it), the calls
// it served fail at once with a NodeError, and the tree draws every node
// alive or failed, never a dead one alive. Stop is quick.
func TestFaultOnEveryStartEndsFailed(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	for _, kind := range []string{"publisher", "requests", "txn"} {
		t.Run(kind, func(t *testing.T) {
			failed := make(chan amqpactor.StateChange, 64)
			app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName("every-start-"+kind),
				amqpactor.WithSupervisorStrategy(actor.NewOneForOneStrategy(3, time.Minute, actor.DefaultDecider)),
				amqpactor.WithStateChanges(func(sc amqpactor.StateChange) {
					if sc.To == actors.StateFailed {
						select {
						case failed <- sc:
						default:
						}
					}
				}))
			_, err := app.Subscribe(amqpactor.Queue("orders"), func(context.Context, *amqpactor.Message) error { return nil })
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			require.NoError(t, app.Start(ctx))
			defer func() { _ = app.Stop(context.Background()) }()
			tree, err := app.Tree(ctx)
			require.NoError(t, err)
			node := find(tree, kind, "")
			require.NotNil(t, node)

			sc := crashUntilFailed(t, sys, node.ActorPID(), "connection/"+kind, failed)
			var ne *amqpactor.NodeError
			require.ErrorAs(t, sc.Err, &ne)
			require.ErrorContains(t, app.Health(), "connection/"+kind+" failed")

			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			defer ccancel()
			t0 := time.Now()
			switch kind {
			case "publisher":
				err = app.Publish(cctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("x")})
			case "requests":
				_, err = app.Request(cctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("x")})
			case "txn":
				err = app.Transaction(cctx, func(*amqpactor.Tx) error { return nil })
			}
			require.Less(t, time.Since(t0), time.Second, "a call to the failed %s took %s", kind, time.Since(t0))
			require.ErrorAs(t, err, &ne, "a call to the failed %s: %v", kind, err)

			tree, err = app.Tree(ctx)
			require.NoError(t, err)
			alive, nfailed := drawnHonestly(t, sys, tree)
			require.Equal(t, 1, nfailed, "the failed %s is drawn failed", kind)
			t.Logf("%s: %d nodes alive, %d failed; %v", kind, alive, nfailed, app.Health())

			t0 = time.Now()
			_ = app.Stop(ctx)
			require.Less(t, time.Since(t0), time.Second)
		})
	}
}

// Nodes of several kinds crashed past their supervisor's budget: every
// node the tree draws is alive in protoactor's registry or drawn failed.
func TestTreeDrawsNoDeadNodeAlive(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName("tree-truth"),
		amqpactor.WithSupervisorStrategy(actor.NewOneForOneStrategy(3, time.Minute, actor.DefaultDecider)))
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(context.Context, *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	_, err = app.Subscribe(amqpactor.Queue("other"), func(context.Context, *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { _ = app.Stop(context.Background()) }()
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("x")}))
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	var pids []*actor.PID
	for _, k := range [][2]string{{"sender", "orders"}, {"subscription", "other"}} {
		n := find(tree, k[0], k[1])
		require.NotNil(t, n, "no %s on %s", k[0], k[1])
		pids = append(pids, n.ActorPID())
	}
	for range 12 {
		for _, pid := range pids {
			sys.Root.Send(pid, &testhook.Crash{Reason: "test"})
		}
		time.Sleep(5 * time.Millisecond) // a pace, as an operator's faults come; nothing is awaited
	}
	// Whatever each parent made of it, protoactor has stopped both.
	require.Eventually(t, func() bool {
		for _, pid := range pids {
			if _, ok := sys.ProcessRegistry.GetLocal(pid.Id); ok {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond)
	tree, err = app.Tree(ctx)
	require.NoError(t, err)
	alive, failed := drawnHonestly(t, sys, tree)
	require.GreaterOrEqual(t, failed, 1)
	t.Logf("%d nodes alive, %d failed", alive, failed)
	t0 := time.Now()
	_ = app.Stop(ctx)
	require.Less(t, time.Since(t0), time.Second)
}
