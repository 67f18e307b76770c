package amqpactor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/internal/testhook"
)

// A connection actor its supervisor gives up on ends the App's tree: the
// App reports it (Health names the connection, a StateChange says failed)
// and every call fails at once with an error that wraps ErrStopped and
// names the node, rather than waiting out its context.
func TestConnectionGivenUpFailsEveryCallAtOnce(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	failed := make(chan amqpactor.StateChange, 16)
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName("connection-given-up-calls"),
		amqpactor.WithStateChanges(func(sc amqpactor.StateChange) {
			if sc.To == actors.StateFailed {
				failed <- sc
			}
		}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { _ = app.Stop(context.Background()) }() // a failed assertion leaks no App into the next test's goleak
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	for range 11 { // the root resumes it at most 10 times a minute
		sys.Root.Send(tree.ActorPID(), &testhook.Crash{Reason: "test"})
	}
	select {
	case sc := <-failed:
		require.Equal(t, "connection", sc.Path)
		var ne *amqpactor.NodeError
		require.ErrorAs(t, sc.Err, &ne)
	case <-time.After(10 * time.Second):
		t.Fatal("no StateChange to failed")
	}
	require.Eventually(t, func() bool { return app.Health() != nil }, 10*time.Second, time.Millisecond)
	require.ErrorIs(t, app.Health(), amqpactor.ErrUnhealthy)
	require.ErrorContains(t, app.Health(), "connection failed")

	quick := func(what string, call func(context.Context) error) {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		t0 := time.Now()
		err := call(cctx)
		require.Less(t, time.Since(t0), time.Second, "%s took %s", what, time.Since(t0))
		require.ErrorIs(t, err, amqpactor.ErrStopped, "%s", what)
		var ne *amqpactor.NodeError
		require.ErrorAs(t, err, &ne, "%s", what)
		require.Equal(t, "connection", ne.Path)
	}
	quick("Publish", func(ctx context.Context) error {
		return app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("x")})
	})
	quick("Request", func(ctx context.Context) error {
		_, err := app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("x")})
		return err
	})
	quick("Transaction", func(ctx context.Context) error {
		return app.Transaction(ctx, func(*amqpactor.Tx) error { return errors.New("must not run") })
	})
	t0 := time.Now()
	_, err = app.Subscribe(amqpactor.Queue("late"), func(context.Context, *amqpactor.Message) error { return nil })
	require.Less(t, time.Since(t0), time.Second, "Subscribe took %s", time.Since(t0))
	var ne *amqpactor.NodeError
	require.ErrorAs(t, err, &ne, "Subscribe: %v", err)

	t0 = time.Now()
	_ = app.Stop(ctx)
	require.Less(t, time.Since(t0), time.Second)
}
