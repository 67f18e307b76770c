package amqpactor_test

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// An actor that answers a delivery just as the handler's timeout passes
// (as an actor busy when a link detaches does) must not race with
// ActorHandler giving up on it: the late answer is dropped, the delivery
// is redelivered and then answered in time. Run under -race: the wait used
// to be a protoactor Future, whose late answer writes its result unlocked
// while the timed-out waiter reads it.
func TestActorHandlerLateAnswer(t *testing.T) {
	noLeaks(t)
	const n, timeout = 200, 5 * time.Millisecond
	sys := sharedSystem(t)
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		d, ok := ctx.Message().(*amqpactor.Delivery)
		if !ok {
			return
		}
		if d.Message.DeliveryCount > 0 {
			ctx.Respond(amqpactor.Done(nil))
			return
		}
		sender, root := ctx.Sender(), ctx.ActorSystem().Root
		time.AfterFunc(timeout, func() { root.Send(sender, amqpactor.Done(nil)) })
	}))
	broker := inproc.New()
	app, ctx := startActorApp(t, broker, sys, func(app *amqpactor.App) {
		_, err := app.Subscribe(amqpactor.Queue("late"), amqpactor.ActorHandler(pid),
			amqpactor.WithHandlerTimeout(timeout), amqpactor.WithPartitions(4))
		require.NoError(t, err)
	})
	for i := range n {
		require.NoError(t, app.Publish(ctx, amqpactor.Queue("late"), &amqpactor.Message{MessageID: uint64(i), Body: []byte("x")}))
	}
	require.Eventually(t, func() bool { return broker.QueueDepth("late") == 0 && broker.Unsettled("late") == 0 },
		30*time.Second, 5*time.Millisecond, "every delivery settled (depth %d, unsettled %d)", broker.QueueDepth("late"), broker.Unsettled("late"))
}
