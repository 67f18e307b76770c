package amqpactor_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/internal/testhook"
)

// A receiver that spends its restart budget (12 panics in a row; the
// subscription's strategy allows 10 a minute) used to be stopped for good
// while its subscription still showed attached: no StateChange said so, a
// message published afterwards was never handled, and Stop waited out its
// whole bound (issue 26). Now the subscription escalates: it is restarted,
// with a new link, and the next message is handled; the App stays healthy.
func TestReceiverOutOfRestartsIsRebuilt(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName("receiver-out-of-restarts"),
		amqpactor.WithCloseTimeout(5*time.Second))
	var handled atomic.Int64
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(context.Context, *amqpactor.Message) error {
		handled.Add(1)
		return nil
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	require.NoError(t, app.Ready())
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	rcv := find(tree, "receiver", "orders").ActorPID()
	for range 12 {
		sys.Root.Send(rcv, &testhook.Crash{Reason: "test"})
	}
	// The old receiver is gone and a new one attached in its place.
	require.Eventually(t, func() bool {
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		tree, err := app.Tree(tctx)
		if err != nil {
			return false
		}
		r := find(tree, "receiver", "orders")
		return r != nil && !r.ActorPID().Equal(rcv) && r.State == "attached"
	}, 10*time.Second, 5*time.Millisecond, "a new receiver attached")
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("after")}))
	require.Eventually(t, func() bool { return handled.Load() == 1 }, 10*time.Second, time.Millisecond,
		"the message published after the receiver's last panic is handled")
	require.NoError(t, app.Health())
	require.Eventually(t, func() bool { return app.Ready() == nil }, 10*time.Second, time.Millisecond)
	t0 := time.Now()
	require.NoError(t, app.Stop(ctx))
	require.Less(t, time.Since(t0), time.Second, "Stop after a rebuilt receiver is as quick as any")
}

// A subscription that spends its own restart budget (the connection's
// strategy allows 10 a minute) is gone for good: its node is failed, a
// StateChange says so, Health names it, Ready is not nil, and Stop is quick.
func TestSubscriptionOutOfRestartsIsFailed(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	failed := make(chan amqpactor.StateChange, 16)
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName("subscription-out-of-restarts"),
		amqpactor.WithCloseTimeout(5*time.Second), amqpactor.WithStateChanges(func(sc amqpactor.StateChange) {
			if sc.To == "failed" {
				failed <- sc
			}
		}))
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(context.Context, *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	_, err = app.Subscribe(amqpactor.Queue("other"), func(context.Context, *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.Error(t, app.Ready(), "Ready before Start")
	require.NoError(t, app.Start(ctx))
	require.NoError(t, app.Health())
	require.NoError(t, app.Ready())
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	sub := find(tree, "subscription", "orders").ActorPID()
	for range 12 {
		sys.Root.Send(sub, &testhook.Crash{Reason: "test"})
	}
	select {
	case sc := <-failed:
		require.Equal(t, "connection/subscription:subscription-out-of-restarts.orders", sc.Path)
		require.Error(t, sc.Err)
	case <-time.After(10 * time.Second):
		t.Fatal("no StateChange to failed")
	}
	err = app.Health()
	require.Error(t, err)
	require.ErrorIs(t, err, amqpactor.ErrUnhealthy)
	require.Contains(t, err.Error(), "subscription:subscription-out-of-restarts.orders failed")
	require.NotContains(t, err.Error(), ".other")
	err = app.Ready()
	require.ErrorIs(t, err, amqpactor.ErrNotReady)
	require.Contains(t, err.Error(), "subscription:subscription-out-of-restarts.orders")
	tree, err = app.Tree(ctx)
	require.NoError(t, err)
	n := find(tree, "subscription", "orders")
	require.NotNil(t, n, "the failed subscription stays in the tree")
	require.Equal(t, "failed", n.State)
	require.True(t, strings.Contains(n.LastError, "restart"), n.LastError)
	t0 := time.Now()
	require.NoError(t, app.Stop(ctx))
	require.Less(t, time.Since(t0), time.Second, "Stop after a failure is as quick as a normal one")
}

// A subscription whose re-attach is refused is not ready: Ready names it
// while the broker refuses, and is nil again once it has re-attached.
func TestReadyWhileReattachIsRefused(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	broker := inproc.New()
	app := amqpactor.New(broker, amqpactor.WithActorSystem(sys), amqpactor.WithName("ready-refused"),
		amqpactor.WithBackoff(5*time.Millisecond, 20*time.Millisecond))
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(context.Context, *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	require.Eventually(t, func() bool { return app.Ready() == nil }, 5*time.Second, time.Millisecond)
	broker.RefuseAttach(amqpactor.Queue("orders"), "amqp:resource-locked", "test refusal")
	broker.DetachLinks(amqpactor.Queue("orders"), "amqp:link:detach-forced", "test")
	require.Eventually(t, func() bool {
		err := app.Ready()
		return err != nil && strings.Contains(err.Error(), "subscription:ready-refused.orders")
	}, 5*time.Second, time.Millisecond, "Ready names the subscription while its re-attach is refused")
	require.ErrorIs(t, app.Ready(), amqpactor.ErrNotReady)
	require.NoError(t, app.Health(), "a refusal it keeps retrying is not a failure for good")
	broker.ClearRefusals()
	require.Eventually(t, func() bool { return app.Ready() == nil }, 10*time.Second, time.Millisecond,
		"ready again once it re-attached: %v", app.Ready())
}
