package sender_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/sender"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// fakeSession attaches fakeLinks. While hold is set, NewSender waits for
// release (or its context).
type fakeSession struct {
	calls   atomic.Int64
	hold    bool
	release chan struct{}
	failing bool // its links fail every Send
}

func (s *fakeSession) NewSender(ctx context.Context, _ transport.SenderOptions) (transport.Sender, error) {
	s.calls.Add(1)
	if s.hold {
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &fakeLink{failing: s.failing}, nil
}

func (s *fakeSession) NewReceiver(context.Context, transport.ReceiverOptions) (transport.Receiver, error) {
	return nil, errors.New("fake: no receivers")
}

func (s *fakeSession) Close(context.Context) error { return nil }

type fakeLink struct {
	failing bool
	sent    atomic.Int64
}

type accepted struct{}

func (accepted) Wait(context.Context) (messages.Outcome, error) {
	return messages.Outcome{Kind: messages.Accepted}, nil
}

func (l *fakeLink) Send(context.Context, *amqp.Message, bool) (transport.Receipt, error) {
	l.sent.Add(1)
	if l.failing {
		return nil, &amqp.LinkError{}
	}
	return accepted{}, nil
}

func (l *fakeLink) Address() string             { return "fake" }
func (l *fakeLink) Close(context.Context) error { return nil }

func state(t *testing.T, sys *actor.ActorSystem, pid *actor.PID) string {
	res, err := sys.Root.RequestFuture(pid, &protocol.Describe{}, time.Second).Result()
	require.NoError(t, err)
	return res.(*protocol.Described).Node.State
}

// A link that died under a lost connection arms a retry; the new session's
// SessionUp attaches at once. The retry, firing while that attach is in
// flight, must not start a second one: two attached links meant two
// writers, the first of which nothing ever stopped, so the drain's
// goroutines never ended and Stop waited out its deadline.
func TestOneAttachAtATime(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()
	// The retry comes 50 to 100 ms after the link ends.
	env := &actors.Env{Root: sys.Root, Log: slog.New(slog.DiscardHandler), CloseTimeout: 5 * time.Second,
		Backoff: actors.Backoff{Initial: 100 * time.Millisecond, Max: 100 * time.Millisecond}}
	sess1 := &fakeSession{failing: true}
	pid := sys.Root.Spawn(sender.New(env, sender.Config{Address: address.Queue("q"), Session: sess1}))

	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sys.Root.Send(pid, &protocol.Publish{Ctx: ctx, Address: address.Queue("q"), Message: amqp.NewMessage([]byte("x")), Done: done})
	// The link fails the send: the publish waits for the next link, and a
	// retry is armed.
	require.Eventually(t, func() bool { return state(t, sys, pid) == protocol.StateRestarting }, 5*time.Second, time.Millisecond)

	// The connection is lost and comes back: a new session, whose attach
	// is held in flight.
	sess2 := &fakeSession{hold: true, release: make(chan struct{})}
	sys.Root.Send(pid, &sender.SessionDown{Err: &amqp.ConnError{}})
	sys.Root.Send(pid, &sender.SessionUp{Session: sess2})
	require.Eventually(t, func() bool { return sess2.calls.Load() == 1 }, 5*time.Second, time.Millisecond, "SessionUp attaches")
	require.Never(t, func() bool { return sess2.calls.Load() > 1 }, 300*time.Millisecond, time.Millisecond,
		"a second attach started while the first was in flight")
	close(sess2.release)
	select {
	case err := <-done:
		require.NoError(t, err, "the publish went out on the new link")
	case <-ctx.Done():
		t.Fatal("the publish was never answered")
	}

	// The drain ends every goroutine of the sender.
	drained := make(chan error, 1)
	dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer dcancel()
	sys.Root.Send(pid, &protocol.Drain{Ctx: dctx, Done: drained})
	select {
	case err := <-drained:
		require.NoError(t, err)
	case <-dctx.Done():
		t.Fatal("the drain was never answered")
	}
	require.NoError(t, sys.Root.PoisonFuture(pid).Wait())
	require.NoError(t, env.Wait(dctx), "every goroutine of the sender ended")
}
