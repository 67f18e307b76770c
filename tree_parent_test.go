package amqpactor_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
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

// WithSupervisorStrategy decides for every actor under the connection: a
// receiver's panic is its decision, and protoactor's SupervisorEvent for it
// is on the EventStream.
func TestWithSupervisorStrategyDecides(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	var decisions atomic.Int64
	strategy := actor.NewOneForOneStrategy(10, time.Minute, func(reason any) actor.Directive {
		decisions.Add(1)
		return actor.RestartDirective
	})
	events := supervisorEvents(t, sys, "strategy-app")
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName("strategy-app"),
		amqpactor.WithSupervisorStrategy(strategy))
	var handled atomic.Int64
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(context.Context, *amqpactor.Message) error { handled.Add(1); return nil })
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	for _, kind := range []string{"receiver", "subscription", "publisher"} {
		before := decisions.Load()
		sys.Root.Send(find(tree, kind, "").ActorPID(), &testhook.Crash{Reason: "test"})
		require.Eventually(t, func() bool { return decisions.Load() > before }, 5*time.Second, time.Millisecond,
			"the strategy decides for the %s", kind)
		tree, err = app.Tree(ctx)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return events.Load() >= 3 }, 5*time.Second, time.Millisecond, "SupervisorEvents on the EventStream")
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("x")}))
	require.Eventually(t, func() bool { return handled.Load() == 1 }, 5*time.Second, time.Millisecond)
}

// A detached link is a failure its parent's strategy decides (issue 26):
// DetachLinks while 2,000 messages flow reaches the strategy for the
// receiver and for the sender, the EventStream carries a SupervisorEvent
// for each, and nothing is lost.
func TestDetachIsASupervisedFailure(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	var linkDecisions atomic.Int64
	strategy := actor.NewOneForOneStrategy(1000, time.Minute, func(reason any) actor.Directive {
		var le *amqpactor.LinkError
		if err, ok := reason.(error); ok && errors.As(err, &le) {
			linkDecisions.Add(1)
		}
		return actor.RestartDirective
	})
	events := supervisorEvents(t, sys, "detach-supervised")
	broker := inproc.New()
	app := amqpactor.New(broker, amqpactor.WithActorSystem(sys), amqpactor.WithName("detach-supervised"),
		amqpactor.WithSupervisorStrategy(strategy), amqpactor.WithBackoff(time.Millisecond, 10*time.Millisecond))
	const n = 2000
	seen := newTally(n)
	_, err := app.Subscribe(amqpactor.Queue("orders"), seen.handle)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	errs := make(chan error, 1)
	go func() {
		for i := range n {
			if err := app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte(strconv.Itoa(i))}); err != nil {
				errs <- err
				return
			}
			if i%500 == 250 {
				broker.DetachLinks(amqpactor.Queue("orders"), "amqp:link:detach-forced", "test")
			}
		}
		errs <- nil
	}()
	require.NoError(t, <-errs)
	require.Eventually(t, func() bool { return seen.distinct() == n }, 30*time.Second, time.Millisecond,
		"every message handled: %d of %d", seen.distinct(), n)
	require.GreaterOrEqual(t, linkDecisions.Load(), int64(2), "the strategy decided for detached links")
	require.GreaterOrEqual(t, events.Load(), linkDecisions.Load(), "a SupervisorEvent for each decision")
	t.Logf("link decisions %d, events %d, duplicates %d", linkDecisions.Load(), events.Load(), seen.duplicates())
}

// supervisorEvents counts the SupervisorEvents on sys's EventStream for
// actors whose id holds name, until the test ends.
func supervisorEvents(t *testing.T, sys *actor.ActorSystem, name string) *atomic.Int64 {
	var n atomic.Int64
	sub := sys.EventStream.Subscribe(func(evt any) {
		if e, ok := evt.(*actor.SupervisorEvent); ok && strings.Contains(e.Child.Id, name) {
			n.Add(1)
		}
	})
	t.Cleanup(func() { sys.EventStream.Unsubscribe(sub) })
	return &n
}
