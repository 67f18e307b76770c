package amqpactor

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/internal/protocol"
)

// A callback that does not return holds up only the delivery goroutine: put
// never blocks, a full queue drops and counts, what was queued is delivered
// in order once the callback returns, and stop ends the goroutine.
func TestStateQueueDropsWhenFullAndKeepsOrder(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()
	release := make(chan struct{})
	var got []string
	a := New(nil, WithStateChanges(func(sc StateChange) {
		if len(got) == 0 {
			<-release
		}
		got = append(got, sc.To)
	}))
	e := a.startStateEvents(sys)
	const extra = 10
	n := stateChangeQueue + extra
	start := time.Now()
	for i := range n {
		e.put(protocol.StateChange{Path: "connection", To: strconv.Itoa(i)})
	}
	require.Less(t, time.Since(start), 5*time.Second, "put never blocks")
	// The goroutine holds one (blocked in the callback) or none yet.
	dropped := a.DroppedStateChanges()
	require.True(t, dropped == extra || dropped == extra-1, "dropped %d", dropped)
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, e.stop(ctx))
	require.Len(t, got, n-int(dropped))
	for i, s := range got {
		require.Equal(t, strconv.Itoa(i), s)
	}
}
