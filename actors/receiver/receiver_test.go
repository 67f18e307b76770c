package receiver_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/dispatcher"
	"github.com/amqpactor/amqpactor/actors/receiver"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// fakeLink hands out the messages in its queue and records what the
// receiver does with them, in order.
type fakeLink struct {
	msgs chan *amqp.Message
	mu   sync.Mutex
	log  []string
	done chan struct{}
	once sync.Once
}

func (l *fakeLink) note(s string) {
	l.mu.Lock()
	l.log = append(l.log, s)
	l.mu.Unlock()
}

func (l *fakeLink) events() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.log...)
}

func (l *fakeLink) Address() string            { return "fake" }
func (l *fakeLink) IssueCredit(n uint32) error { return nil }
func (l *fakeLink) Receive(ctx context.Context) (*amqp.Message, error) {
	select {
	case m := <-l.msgs:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.done:
		return nil, &amqp.LinkError{}
	}
}

func (l *fakeLink) Settle(_ context.Context, m *amqp.Message, o messages.Outcome) error {
	l.note("settle " + string(m.GetData()) + " " + o.Kind.String())
	return nil
}

func (l *fakeLink) Close(context.Context) error {
	l.note("close")
	l.once.Do(func() { close(l.done) })
	return nil
}

// spawnReceiver runs a receiver for spec on link under a parent that
// spawns it (as a subscription does), in an actor system of its own that
// the test shuts down.
func spawnReceiver(t *testing.T, link *fakeLink, spec *protocol.SubscriptionSpec, route func(*protocol.Delivery)) (*actor.ActorSystem, *actors.Env, *actor.PID) {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	t.Cleanup(sys.Shutdown)
	env := &actors.Env{Root: sys.Root, Log: slog.New(slog.DiscardHandler), CloseTimeout: 5 * time.Second,
		Base: context.Background()}
	props := receiver.New(env, &fakeSession{link: link}, spec, routeActor(sys, route), false, false)
	spawned := make(chan *actor.PID, 1)
	sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*actor.Started); ok {
			spawned <- c.Spawn(props)
		}
	}))
	return sys, env, <-spawned
}

// routeActor stands in for the dispatcher: it calls route for each delivery
// of every *dispatcher.Deliveries it receives, in order.
func routeActor(sys *actor.ActorSystem, route func(*protocol.Delivery)) *actor.PID {
	return sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*dispatcher.Deliveries); ok {
			for _, d := range m.Items {
				route(d)
			}
		}
	}))
}

type fakeSession struct{ link *fakeLink }

func (s *fakeSession) NewSender(context.Context, transport.SenderOptions) (transport.Sender, error) {
	return nil, errors.New("fake: no senders")
}

func (s *fakeSession) NewReceiver(context.Context, transport.ReceiverOptions) (transport.Receiver, error) {
	return s.link, nil
}

func (s *fakeSession) Close(context.Context) error { return nil }

// When the graceful part of a drain runs out while a handler still holds a
// delivery (and ignores its context), the delivery is settled released
// before the link closes, the handler's context is cancelled, and the
// drain is answered by its Ctx; the handler's own late verdict is dropped.
func TestDrainReleasesWhatHandlersHold(t *testing.T) {
	link := &fakeLink{msgs: make(chan *amqp.Message, 2), done: make(chan struct{})}
	link.msgs <- amqp.NewMessage([]byte("held"))
	spec := &protocol.SubscriptionSpec{Address: address.Queue("q"), Credit: 8, Partitions: 1}

	holding := make(chan struct{})
	cancelled := make(chan struct{})
	finish := make(chan struct{})
	var handlers sync.WaitGroup
	route := func(d *protocol.Delivery) {
		handlers.Go(func() {
			close(holding)
			<-d.Ctx.Done()
			close(cancelled)
			<-finish // a handler that goes on after its context ended
			d.Settle(messages.Outcome{Kind: messages.Accepted})
		})
	}
	// The receiver reports to its parent (a subscription).
	sys, env, pid := spawnReceiver(t, link, spec, route)
	select {
	case <-holding:
	case <-time.After(5 * time.Second):
		t.Fatal("the delivery never reached the handler")
	}

	hard, cancelHard := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelHard()
	grace, cancelGrace := context.WithTimeout(hard, 200*time.Millisecond)
	defer cancelGrace()
	done := make(chan error, 1)
	sys.Root.Send(pid, &protocol.Drain{Ctx: hard, Graceful: grace, Done: done})
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.DeadlineExceeded, "the drain says it was cut")
	case <-hard.Done():
		t.Fatal("the drain was not answered by its Ctx")
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context was not cancelled")
	}
	require.Equal(t, []string{"settle held released", "close"}, link.events(),
		"the held delivery is released, then the link closes")

	close(finish)
	handlers.Wait()
	require.Equal(t, []string{"settle held released", "close"}, link.events(), "the handler's late accept is dropped")
	require.NoError(t, sys.Root.PoisonFuture(pid).Wait())
	require.NoError(t, env.Wait(hard))
}

// A transaction finds a delivery the receiver's link holds by its message
// (receiver.Find, through the App's Env), until it is settled.
func TestFindSeesTheReceiversDeliveries(t *testing.T) {
	link := &fakeLink{msgs: make(chan *amqp.Message, 1), done: make(chan struct{})}
	link.msgs <- amqp.NewMessage([]byte("a"))
	spec := &protocol.SubscriptionSpec{Address: address.Queue("q"), Credit: 8, Partitions: 1}
	got := make(chan *protocol.Delivery, 1)
	sys, env, pid := spawnReceiver(t, link, spec, func(d *protocol.Delivery) { got <- d })
	var d *protocol.Delivery
	select {
	case d = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the delivery never reached the handler")
	}
	_, err := receiver.Find(nil, d.Message)
	require.ErrorIs(t, err, receiver.ErrNotHeld, "no App")
	h, err := receiver.Find(env, d.Message)
	require.NoError(t, err)
	require.Same(t, link, h.Link())
	m := d.Message
	d.Settle(messages.Outcome{Kind: messages.Accepted})
	require.Eventually(t, func() bool {
		_, err := receiver.Find(env, m)
		return errors.Is(err, receiver.ErrNotHeld)
	}, 5*time.Second, time.Millisecond, "a settled delivery")
	require.NoError(t, sys.Root.PoisonFuture(pid).Wait())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, env.Wait(ctx))
}
