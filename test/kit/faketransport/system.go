package faketransport

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/protocol"
)

// Bound is how long a test waits for anything it expects to happen.
const Bound = 5 * time.Second

// NewSystem returns a quiet actor system and an Env on it with a short
// backoff (1 to 4 ms); the cleanup waits for every goroutine the Env
// started, then shuts the system down.
func NewSystem(t testing.TB) (*actor.ActorSystem, *actors.Env) {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	env := &actors.Env{Root: sys.Root, Log: slog.New(slog.DiscardHandler), CloseTimeout: Bound,
		Backoff: actors.Backoff{Initial: time.Millisecond, Max: 4 * time.Millisecond}, Base: context.Background()}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Bound)
		defer cancel()
		env.MarkStopped()
		if err := env.Wait(ctx); err != nil {
			t.Errorf("goroutines of the actors still running: %v", err)
		}
		sys.Shutdown()
	})
	return sys, env
}

// Describe asks pid for its node.
func Describe(t testing.TB, sys *actor.ActorSystem, pid *actor.PID) *protocol.Described {
	t.Helper()
	res, err := sys.Root.RequestFuture(pid, &protocol.Describe{}, Bound).Result()
	if err != nil {
		t.Fatalf("describe %s: %v", pid, err)
	}
	return res.(*protocol.Described)
}

// Drain drains pid and returns its answer; it fails the test when none
// comes within Bound.
func Drain(t testing.TB, sys *actor.ActorSystem, pid *actor.PID) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Bound)
	defer cancel()
	done := make(chan error, 1)
	sys.Root.Send(pid, &protocol.Drain{Ctx: ctx, Done: done})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		t.Fatalf("drain of %s never answered", pid)
		return nil
	}
}

// OpenSession connects a fresh Connector and begins a session on it, for a
// test of one link actor.
func OpenSession(t testing.TB) *Session {
	t.Helper()
	conn, err := (&Connector{}).Connect(context.Background())
	if err != nil {
		t.Fatalf("fake connect: %v", err)
	}
	sess, err := conn.NewSession(context.Background())
	if err != nil {
		t.Fatalf("fake session: %v", err)
	}
	return sess.(*Session)
}
