package actors

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor/internal/protocol"
)

// A drain that lands in the mailbox of an actor already stopping (its
// supervisor stopped it, and the stop is under way) is never read:
// protoactor drops what a stopped actor's mailbox still holds, and it is no
// dead letter either. DrainAll must count that actor drained when it
// stops, not wait out the drain's context.
func TestDrainAllCountsATargetThatStopsAsDrained(t *testing.T) {
	defer goleak.VerifyNone(t)
	// A watch of an actor already gone is a dead letter: the throttle of
	// their logging keeps a goroutine for its interval.
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}), actor.WithDeadLetterThrottleInterval(time.Millisecond))
	defer sys.Shutdown()
	stopping, release := make(chan struct{}), make(chan struct{})
	drained := make(chan struct{}, 1)
	slow := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *protocol.Drain:
			drained <- struct{}{}
			m.Done <- nil
		case *actor.Stopping:
			close(stopping)
			<-release // the drain is queued behind the stop meanwhile
		}
	}))
	answers := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*protocol.Drain); ok {
			m.Done <- nil
		}
	}))
	defer sys.Root.Stop(answers)
	sys.Root.Stop(slow)
	<-stopping
	// The stop completes once the drain is in slow's mailbox.
	root := sys.Root.WithSenderMiddleware(func(next actor.SenderFunc) actor.SenderFunc {
		return func(c actor.SenderContext, target *actor.PID, env *actor.MessageEnvelope) {
			next(c, target, env)
			if _, ok := env.Message.(*protocol.Drain); ok && target.Equal(slow) {
				close(release)
			}
		}
	})
	e := &Env{Root: root}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := make(chan error, 1)
	t0 := time.Now()
	go func() { res <- e.DrainAll(&protocol.Drain{Ctx: ctx}, []*actor.PID{slow, answers}) }()
	select {
	case err := <-res:
		require.NoError(t, err, "a target that stopped has nothing left to drain")
	case <-time.After(5 * time.Second):
		t.Fatal("DrainAll waits for an actor that stopped without reading its drain")
	}
	require.Less(t, time.Since(t0), 2*time.Second)
	require.Empty(t, drained, "the stopping actor never read the drain")
}
