package amqpactor

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
)

// TestActorHandlerStopsWaitingOnCancel: a cancelled handler context ends the
// wait for an actor that never answers at once, not at the future's timeout.
func TestActorHandlerStopsWaitingOnCancel(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	silent := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	app := &App{}
	app.cfg.system = sys
	h := ActorHandler(silent)
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), appKey{}, app))
	errc := make(chan error, 1)
	go func() { errc <- h(ctx, &Message{Body: []byte("x")}) }()
	cancel()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler still waits for the actor after its context was cancelled")
	}
}
