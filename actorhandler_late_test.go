package amqpactor_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// lateActor answers a delivery it sees again (delivery-count > 0) at once,
// and a first delivery only after delay, with late(d).
func lateActor(sys *actor.ActorSystem, delay time.Duration, late func(d *amqpactor.Delivery) any) *actor.PID {
	return sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		d, ok := ctx.Message().(*amqpactor.Delivery)
		if !ok {
			return
		}
		if d.Message.DeliveryCount > 0 {
			ctx.Respond(amqpactor.Done(nil))
			return
		}
		sender, root := ctx.Sender(), ctx.ActorSystem().Root
		time.AfterFunc(delay, func() { root.Send(sender, late(d)) })
	}))
}

// publishSettled publishes n messages (message-ids 0 to n-1) to q and
// waits until the broker holds none of them, delivered or not.
func publishSettled(t *testing.T, ctx context.Context, app *amqpactor.App, broker *inproc.Broker, q string, n int) {
	t.Helper()
	for i := range n {
		require.NoError(t, app.Publish(ctx, amqpactor.Queue(q), &amqpactor.Message{MessageID: uint64(i), Body: []byte("x")}))
	}
	require.Eventually(t, func() bool { return broker.QueueDepth(q) == 0 && broker.Unsettled(q) == 0 },
		30*time.Second, 5*time.Millisecond, "every delivery settled (depth %d, unsettled %d)", broker.QueueDepth(q), broker.Unsettled(q))
}

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
	pid := lateActor(sys, timeout, func(*amqpactor.Delivery) any { return amqpactor.Done(nil) })
	broker := inproc.New()
	app, ctx := startActorApp(t, broker, sys, func(app *amqpactor.App) {
		_, err := app.Subscribe(amqpactor.Queue("late"), amqpactor.ActorHandler(pid),
			amqpactor.WithHandlerTimeout(timeout), amqpactor.WithPartitions(4))
		require.NoError(t, err)
	})
	publishSettled(t, ctx, app, broker, "late", n)
}

// An actor that reads its delivery after ActorHandler gave up on it (past
// the handler's timeout) reads a message of its own: the partition retries
// in place with Backoff, counting the attempt in the message it runs next,
// and used to change the very Message the actor still held.
func TestActorHandlerLateReadWithBackoff(t *testing.T) {
	noLeaks(t)
	const n, timeout = 50, 5 * time.Millisecond
	sys := sharedSystem(t)
	pid := lateActor(sys, 2*timeout, func(d *amqpactor.Delivery) any {
		return amqpactor.Done(fmt.Errorf("late, delivery-count %d", d.Message.DeliveryCount))
	})
	broker := inproc.New()
	app, ctx := startActorApp(t, broker, sys, func(app *amqpactor.App) {
		_, err := app.Subscribe(amqpactor.Queue("lateread"), amqpactor.ActorHandler(pid), amqpactor.WithHandlerTimeout(timeout),
			amqpactor.WithRetry(amqpactor.RetryPolicy{Backoff: time.Millisecond, MaxBackoff: time.Millisecond, MaxDeliveries: 100}))
		require.NoError(t, err)
	})
	publishSettled(t, ctx, app, broker, "lateread", n)
}

// An actor accepts its delivery in a transaction with the message it was
// handed (a copy of the delivery's own, see above), as a handler does.
func TestActorHandlerTxAccept(t *testing.T) {
	noLeaks(t)
	sys := sharedSystem(t)
	var app *amqpactor.App
	var txErr atomic.Value
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		d, ok := ctx.Message().(*amqpactor.Delivery)
		if !ok {
			return
		}
		tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := app.Transaction(tctx, func(tx *amqpactor.Tx) error {
			if err := tx.Publish(tctx, amqpactor.Queue("txout"), &amqpactor.Message{Body: d.Message.Body}); err != nil {
				return err
			}
			return tx.Accept(d.Message)
		})
		if err != nil {
			txErr.Store(err)
		}
		ctx.Respond(amqpactor.Done(err))
	}))
	broker := inproc.New()
	out := make(chan string, 1)
	var ctx context.Context
	app, ctx = startActorApp(t, broker, sys, func(a *amqpactor.App) {
		_, err := a.Subscribe(amqpactor.Queue("txin"), amqpactor.ActorHandler(pid))
		require.NoError(t, err)
		_, err = a.Subscribe(amqpactor.Queue("txout"), func(_ context.Context, m *amqpactor.Message) error {
			out <- string(m.Body)
			return nil
		})
		require.NoError(t, err)
	})
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("txin"), &amqpactor.Message{Body: []byte("in")}))
	select {
	case got := <-out:
		require.Equal(t, "in", got)
	case <-ctx.Done():
		t.Fatalf("nothing published by the transaction (its error: %v)", txErr.Load())
	}
	require.Nil(t, txErr.Load())
	require.Eventually(t, func() bool { return broker.QueueDepth("txin") == 0 && broker.Unsettled("txin") == 0 },
		10*time.Second, 5*time.Millisecond, "the delivery accepted in the transaction")
}
