package harness

import (
	"log/slog"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor"
)

// NewSystem is an actor system that logs nothing, shut down when the test
// ends.
func NewSystem(t testing.TB) *actor.ActorSystem {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	t.Cleanup(sys.Shutdown)
	return sys
}

// WatchStream records the state changes sys's EventStream carries; the func
// returned unsubscribes.
func WatchStream(sys *actor.ActorSystem) (*Changes, func()) {
	c := NewChanges()
	sub := sys.EventStream.Subscribe(func(evt any) {
		if sc, ok := evt.(*amqpactor.StateChange); ok {
			c.Add(*sc)
		}
	})
	return c, func() { sys.EventStream.Unsubscribe(sub) }
}
