package amqpactor_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/inproc"
)

// The tree App.Tree draws is protoactor's own (issue 26): every node's PID
// extends its parent's, so the actor a user watches or supervises is the
// one drawn above it. The connection used to be drawn as the parent of its
// siblings.
func TestTreeIsTheActorTree(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName("real-tree"))
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(context.Context, *amqpactor.Message) error { return nil },
		amqpactor.WithPartitions(2))
	require.NoError(t, err)
	_, err = app.Subscribe(amqpactor.Queue("rpc"), amqpactor.Responder(func(_ context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: req.Body}, nil
	}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("x")}))
	_, err = app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("ping")})
	require.NoError(t, err)
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	nodes := 0
	var walk func(n *amqpactor.Node)
	walk = func(n *amqpactor.Node) {
		nodes++
		for _, c := range n.Children {
			require.True(t, strings.HasPrefix(c.ActorPID().Id, n.ActorPID().Id+"/"),
				"%s (%s) is drawn under %s (%s)", c.Name, c.ActorPID().Id, n.Name, n.ActorPID().Id)
			walk(c)
		}
	}
	walk(tree)
	require.Greater(t, nodes, 8)
}

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
	var events atomic.Int64
	sub := sys.EventStream.Subscribe(func(evt any) {
		if e, ok := evt.(*actor.SupervisorEvent); ok && strings.Contains(e.Child.Id, "strategy-app") {
			events.Add(1)
		}
	})
	defer sys.EventStream.Unsubscribe(sub)
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
		sys.Root.Send(find(tree, kind, "").ActorPID(), &actors.Crash{Reason: "test"})
		require.Eventually(t, func() bool { return decisions.Load() > before }, 5*time.Second, time.Millisecond,
			"the strategy decides for the %s", kind)
		tree, err = app.Tree(ctx)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return events.Load() >= 3 }, 5*time.Second, time.Millisecond, "SupervisorEvents on the EventStream")
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("x")}))
	require.Eventually(t, func() bool { return handled.Load() == 1 }, 5*time.Second, time.Millisecond)
}
