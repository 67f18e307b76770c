package amqpactor_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
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

// crashKinds are the kinds of node an App's tree holds, each as a crash
// test names it: "replies" is the publisher of a Responder's replies.
var crashKinds = []string{"connection", "publisher", "sender", "replies", "requests", "txn",
	"subscription", "receiver", "dispatcher", "partition"}

// findCrashable returns the node of kind in tree (see crashKinds).
func findCrashable(tree *amqpactor.Node, kind string) *amqpactor.Node {
	switch kind {
	case "connection":
		return tree
	case "replies":
		p := find(tree, "publisher", "")
		if p == nil {
			return nil
		}
		for _, c := range p.Children {
			if c.Name == "replies" {
				return c
			}
		}
		return nil
	case "sender":
		return find(tree, "sender", "orders")
	case "subscription", "receiver", "dispatcher", "partition":
		return find(tree, kind, "orders")
	}
	return find(tree, kind, "")
}

// Every kind of node crashed 12 times, 20 ms apart, under the default
// strategy and under one that allows 3 restarts a minute: afterwards the
// App either handles the next message (and answers the next request), or
// reports the failed node (Health names it, a StateChange says failed).
// No Publish or Request waits out its context, and Stop is quick.
func TestEveryKindCrashedTwelveTimes(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	strategies := map[string]func() actor.SupervisorStrategy{
		"default": func() actor.SupervisorStrategy { return nil },
		"3-per-minute": func() actor.SupervisorStrategy {
			return actor.NewOneForOneStrategy(3, time.Minute, actor.DefaultDecider)
		},
	}
	for _, sname := range []string{"default", "3-per-minute"} {
		for _, kind := range crashKinds {
			t.Run(sname+"/"+kind, func(t *testing.T) {
				crashTwelve(t, sys, kind, strategies[sname]())
			})
		}
	}
}

func crashTwelve(t *testing.T, sys *actor.ActorSystem, kind string, strategy actor.SupervisorStrategy) {
	name := "crash12-" + strings.ReplaceAll(t.Name()[strings.Index(t.Name(), "/")+1:], "/", "-")
	var mu sync.Mutex
	var failed []amqpactor.StateChange
	opts := []amqpactor.Option{amqpactor.WithActorSystem(sys), amqpactor.WithName(name),
		amqpactor.WithCloseTimeout(5 * time.Second), amqpactor.WithBackoff(5*time.Millisecond, 50*time.Millisecond),
		amqpactor.WithStateChanges(func(sc amqpactor.StateChange) {
			if sc.To == actors.StateFailed {
				mu.Lock()
				failed = append(failed, sc)
				mu.Unlock()
			}
		})}
	if strategy != nil {
		opts = append(opts, amqpactor.WithSupervisorStrategy(strategy))
	}
	app := amqpactor.New(inproc.New(), opts...)
	var handled atomic.Int64
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(context.Context, *amqpactor.Message) error {
		handled.Add(1)
		return nil
	}, amqpactor.WithPartitions(2))
	require.NoError(t, err)
	_, err = app.Subscribe(amqpactor.Queue("rpc"), amqpactor.Responder(func(_ context.Context, m *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: m.Body}, nil
	}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	stopped := false
	defer func() {
		if !stopped {
			_ = app.Stop(context.Background())
		}
	}()
	// One message and one request first, so that the sender, the
	// partitions and the replies publisher exist.
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("before")}))
	require.Eventually(t, func() bool { return handled.Load() == 1 }, 10*time.Second, time.Millisecond)
	_, err = app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("before")})
	require.NoError(t, err)

	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	node := findCrashable(tree, kind)
	require.NotNil(t, node, "no %s node in the tree", kind)
	pid := node.ActorPID()
	for range 12 {
		sys.Root.Send(pid, &testhook.Crash{Reason: "test"})
		time.Sleep(20 * time.Millisecond) // the pace the issue measured at; nothing is awaited
	}

	// What an operator sees: either the App works, or it says what failed.
	reported := func() bool {
		if app.Health() == nil {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		return len(failed) > 0
	}
	pctx, pcancel := context.WithTimeout(ctx, 8*time.Second)
	t0 := time.Now()
	perr := app.Publish(pctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("after")})
	pcancel()
	require.False(t, errors.Is(perr, context.DeadlineExceeded), "a Publish waited out its context: %v", perr)
	require.Less(t, time.Since(t0), 5*time.Second, "a Publish took %s", time.Since(t0))
	rctx, rcancel := context.WithTimeout(ctx, 8*time.Second)
	t0 = time.Now()
	_, rerr := app.Request(rctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("after")})
	rcancel()
	require.False(t, errors.Is(rerr, context.DeadlineExceeded), "a Request waited out its context: %v", rerr)
	require.Less(t, time.Since(t0), 5*time.Second, "a Request took %s", time.Since(t0))
	works := func() bool { return perr == nil && rerr == nil && handled.Load() == 2 }
	require.Eventually(t, func() bool { return works() || reported() }, 10*time.Second, time.Millisecond,
		"after 12 crashes of the %s: publish %v, request %v, handled %d, health %v", kind, perr, rerr, handled.Load(), app.Health())
	if !works() {
		herr := app.Health()
		require.ErrorIs(t, herr, amqpactor.ErrUnhealthy)
		t.Logf("reported: %v", herr)
	} else {
		require.NoError(t, app.Health(), "the App works: nothing reported failed")
		// The tree is honest: the node it draws for the kind is alive.
		tree, err := app.Tree(ctx)
		require.NoError(t, err)
		if n := findCrashable(tree, kind); n != nil {
			_, alive := sys.ProcessRegistry.GetLocal(n.ActorPID().Id)
			require.True(t, alive, "the tree draws a dead %s (%s)", kind, n.PID)
		}
	}
	stopped = true
	t0 = time.Now()
	_ = app.Stop(ctx)
	require.Less(t, time.Since(t0), time.Second, "Stop after 12 crashes of the %s", kind)
}
