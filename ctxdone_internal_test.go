package amqpactor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/inproc"
)

// TestStopLetsTheCallersContextGo: publishes sharing one long-lived context
// get relays of the App's own (ctxdone.Table); Stop unregisters them, so a
// service's root context keeps nothing of a stopped App.
func TestStopLetsTheCallersContextGo(t *testing.T) {
	app := New(inproc.New(), WithName("ctxdone-table"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start, cancelStart := context.WithTimeout(ctx, 10*time.Second)
	defer cancelStart()
	require.NoError(t, app.Start(start))
	for range 64 {
		require.NoError(t, app.Publish(ctx, Queue("ctxdone"), &Message{Body: []byte("x")}))
	}
	require.Positive(t, app.ctxs.Watching(), "publishes on one context use the table's relays")
	stop, cancelStop := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelStop()
	require.NoError(t, app.Stop(stop))
	require.Zero(t, app.ctxs.Watching(), "Stop let the context's relays go")
}
