package amqpactor_test

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/internal/testhook"
)

// A subscription closed just as its strategy stops it: the Drain its
// connection sends may land in the mailbox of an actor that is stopping,
// which protoactor drops. Close must not wait out its context for an
// answer that cannot come.
func TestCloseWhileTheSubscriptionIsStopped(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	stop := actor.NewOneForOneStrategy(10, time.Minute, func(any) actor.Directive { return actor.StopDirective })
	for i := range 20 {
		app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName("close-stopping"),
			amqpactor.WithSupervisorStrategy(stop))
		sub, err := app.Subscribe(amqpactor.Queue("orders"), func(context.Context, *amqpactor.Message) error { return nil })
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		require.NoError(t, app.Start(ctx))
		tree, err := app.Tree(ctx)
		require.NoError(t, err)
		pid := find(tree, "subscription", "orders").ActorPID()
		sys.Root.Send(pid, &testhook.Crash{Reason: "test"})
		t0 := time.Now()
		_ = sub.Close(ctx)
		require.Less(t, time.Since(t0), 2*time.Second, "run %d: Close waited for a subscription being stopped", i)
		t0 = time.Now()
		require.NoError(t, app.Stop(ctx))
		require.Less(t, time.Since(t0), time.Second, "run %d: Stop", i)
		cancel()
	}
}
