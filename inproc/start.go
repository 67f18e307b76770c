package inproc

import (
	"context"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor"
)

// Start runs app, built for any connector, on a fresh in-process broker
// instead, starts it, and stops it (bounded by 10 s) in t.Cleanup. It
// returns the broker, for its fault hooks and introspection.
func Start(t testing.TB, app *amqpactor.App) *Broker {
	t.Helper()
	b := New()
	if err := app.ReplaceConnector(b); err != nil {
		t.Fatalf("inproc.Start: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		t.Fatalf("inproc.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			t.Errorf("inproc.Start: stopping the app: %v", err)
		}
	})
	return b
}
