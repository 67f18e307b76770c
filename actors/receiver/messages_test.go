package receiver_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/dispatcher"
	"github.com/amqpactor/amqpactor/actors/receiver"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
)

// The receiver hands its deliveries to the dispatcher actor as
// *dispatcher.Deliveries, and settles on the link what comes back to its
// own mailbox as *receiver.Dispositions.
func TestDeliveriesAndDispositionsAreMessages(t *testing.T) {
	const n = 100
	link := &fakeLink{msgs: make(chan *amqp.Message, n), done: make(chan struct{})}
	for range n {
		link.msgs <- amqp.NewMessage([]byte("m"))
	}
	spec := &protocol.SubscriptionSpec{Address: address.Queue("q"), Credit: n, Partitions: 1}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	t.Cleanup(sys.Shutdown)
	var dispositions, routed atomic.Int64
	spy := func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			if m, ok := env.Message.(*receiver.Dispositions); ok {
				require.NotNil(t, m.From, "a disposition names its partition")
				dispositions.Add(int64(len(m.Items)))
			}
			next(c, env)
		}
	}
	env := &actors.Env{Root: sys.Root, Log: slog.New(slog.DiscardHandler), CloseTimeout: 5 * time.Second,
		Base: context.Background(), Middleware: []actor.ReceiverMiddleware{spy}}
	// The dispatcher's stand-in answers each batch with one batch of
	// outcomes, as a partition does.
	disp := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*dispatcher.Deliveries); ok {
			routed.Add(int64(len(m.Items)))
			for _, d := range m.Items {
				d.Outcome = messages.Outcome{Kind: messages.Accepted}
			}
			m.Items[0].To.Settle(m.Items, c.Self())
		}
	}))
	props := receiver.New(env, &fakeSession{link: link}, spec, disp, false, false)
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*actor.Started); ok {
			c.Spawn(props)
		}
	}))
	require.Eventually(t, func() bool { return len(link.events()) == n }, 10*time.Second, time.Millisecond, "every delivery settled on the link")
	require.EqualValues(t, n, routed.Load(), "every delivery went to the dispatcher")
	require.EqualValues(t, n, dispositions.Load(), "every outcome came back through the receiver's mailbox")
	require.NoError(t, sys.Root.PoisonFuture(pid).Wait())
}
