package amqpactor_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/test/harness"
	"github.com/amqpactor/amqpactor/transport"
)

// Every directive a user's strategy may return for a detached receiver
// link leaves the App working (a message published afterwards is handled)
// or reports the node that failed (Health names it, a StateChange says
// failed); either way Stop is quick.
func TestStrategyDirectivesForADetach(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	// onDetach answers d for a detached link, and else (or restart) for
	// every other failure.
	onDetach := func(d actor.Directive, elseD ...actor.Directive) actor.DeciderFunc {
		other := actor.RestartDirective
		if len(elseD) > 0 {
			other = elseD[0]
		}
		return func(reason any) actor.Directive {
			var le *transport.LinkError
			if err, ok := reason.(error); ok && errors.As(err, &le) {
				return d
			}
			return other
		}
	}
	always := func(d actor.Directive) actor.DeciderFunc { return func(any) actor.Directive { return d } }
	for _, c := range []struct {
		name     string
		strategy actor.SupervisorStrategy
		reported bool // the subscription ends failed rather than working
	}{
		{"restart", actor.NewOneForOneStrategy(10, time.Minute, always(actor.RestartDirective)), false},
		{"resume", actor.NewOneForOneStrategy(10, time.Minute, always(actor.ResumeDirective)), false},
		{"resume-detach-only", actor.NewOneForOneStrategy(10, time.Minute, onDetach(actor.ResumeDirective)), false},
		{"stop", actor.NewOneForOneStrategy(10, time.Minute, always(actor.StopDirective)), true},
		// The receiver is stopped; its subscription fails in turn (not a
		// detach) and is restarted with a new link.
		{"stop-detach-only", actor.NewOneForOneStrategy(10, time.Minute, onDetach(actor.StopDirective)), false},
		// A strategy that allows no restart stops the receiver, and its
		// subscription, failing in turn, is resumed: it must build a new
		// link by itself.
		{"stop-then-resume", actor.NewOneForOneStrategy(0, time.Minute, onDetach(actor.RestartDirective, actor.ResumeDirective)), false},
		{"escalate", actor.NewOneForOneStrategy(10, time.Minute, always(actor.EscalateDirective)), true},
		{"all-for-one-restart", actor.NewAllForOneStrategy(10, time.Minute, always(actor.RestartDirective)), false},
		{"all-for-one-resume", actor.NewAllForOneStrategy(10, time.Minute, always(actor.ResumeDirective)), false},
		{"all-for-one-stop", actor.NewAllForOneStrategy(10, time.Minute, always(actor.StopDirective)), true},
		{"all-for-one-escalate", actor.NewAllForOneStrategy(10, time.Minute, always(actor.EscalateDirective)), true},
	} {
		t.Run(c.name, func(t *testing.T) { detachUnder(t, sys, c.name, c.strategy, c.reported) })
	}
}

func detachUnder(t *testing.T, sys *actor.ActorSystem, name string, strategy actor.SupervisorStrategy, reported bool) {
	name = "directive-" + name
	var mu sync.Mutex
	var failed []amqpactor.StateChange
	b := inproc.New()
	log, _ := harness.NewLog(t)
	app := amqpactor.New(b, amqpactor.WithActorSystem(sys), amqpactor.WithName(name), amqpactor.WithLogger(log),
		amqpactor.WithCloseTimeout(5*time.Second), amqpactor.WithBackoff(5*time.Millisecond, 50*time.Millisecond),
		amqpactor.WithSupervisorStrategy(strategy),
		amqpactor.WithStateChanges(func(sc amqpactor.StateChange) {
			if sc.To == actors.StateFailed {
				mu.Lock()
				failed = append(failed, sc)
				mu.Unlock()
			}
		}))
	var handled atomic.Int64
	var bodiesMu sync.Mutex
	var bodies []string
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(_ context.Context, m *amqpactor.Message) error {
		bodiesMu.Lock()
		bodies = append(bodies, string(m.Body))
		bodiesMu.Unlock()
		handled.Add(1)
		return nil
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	stopped := false
	defer func() {
		if !stopped {
			_ = app.Stop(context.Background())
		}
	}()
	// Published on the broker: the App's sender is not what is tried here.
	require.NoError(t, b.Publish(amqpactor.Queue("orders"), amqp.NewMessage([]byte("before"))))
	require.Eventually(t, func() bool { return handled.Load() == 1 }, 10*time.Second, time.Millisecond)
	// Settled on the broker before the detach: a detach that overtakes the
	// settle gives the message back and it is handled again, rightly (at
	// least once), which would blur what is counted here.
	require.Eventually(t, func() bool { return b.Unsettled("orders") == 0 }, 10*time.Second, time.Millisecond)

	require.Equal(t, 1, b.DetachLinks(amqpactor.Queue("orders"), "amqp:link:detach-forced", "test"))
	require.NoError(t, b.Publish(amqpactor.Queue("orders"), amqp.NewMessage([]byte("after"))))
	sub := "connection/subscription:" + name + ".orders"
	if reported {
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, sc := range failed {
				if sc.Path == sub {
					return true
				}
			}
			return false
		}, 10*time.Second, time.Millisecond, "a StateChange says the subscription failed")
		err := app.Health()
		require.ErrorIs(t, err, amqpactor.ErrUnhealthy)
		require.Contains(t, err.Error(), "subscription:"+name+".orders failed")
		require.Error(t, app.Ready())
	} else {
		if !assert.Eventually(t, func() bool { return handled.Load() == 2 }, 10*time.Second, time.Millisecond,
			"the message published after the detach is handled") {
			bodiesMu.Lock()
			t.Logf("handled: %q; on the queue %d, unsettled %d", bodies, b.QueueDepth("orders"), b.Unsettled("orders"))
			bodiesMu.Unlock()
			tctx, tcancel := context.WithTimeout(ctx, time.Second)
			tree, err := app.Tree(tctx)
			tcancel()
			if err == nil {
				t.Fatalf("tree: %s", treeStates(tree))
			}
			t.Fatalf("tree: %v", err)
		}
		require.Eventually(t, func() bool { return app.Ready() == nil }, 10*time.Second, time.Millisecond,
			"ready again: %v", app.Ready())
		require.NoError(t, app.Health())
		tree, err := app.Tree(ctx)
		require.NoError(t, err)
		require.False(t, strings.Contains(treeStates(tree), "failed"), treeStates(tree))
	}
	t0 := time.Now()
	stopped = true
	// A Stop past its bound shows what it waits for.
	dumped := make(chan struct{})
	dump := time.AfterFunc(time.Second, func() {
		defer close(dumped)
		buf := make([]byte, 1<<22)
		t.Logf("Stop takes over a second; goroutines:\n%s", buf[:runtime.Stack(buf, true)])
	})
	defer func() {
		if !dump.Stop() {
			<-dumped
		}
	}()
	require.NoError(t, app.Stop(ctx))
	require.Less(t, time.Since(t0), time.Second, "Stop after the directive")
}

// treeStates lists every node of n with its state.
func treeStates(n *amqpactor.Node) string {
	s := n.Name + "=" + n.State + " "
	for _, c := range n.Children {
		s += treeStates(c)
	}
	return s
}
