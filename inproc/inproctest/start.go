// Package inproctest runs an App built for a live broker on a fresh
// in-process broker inside a test. It is apart from inproc so that the
// broker itself does not import testing.
package inproctest

import (
	"context"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/internal/testhook"
)

// Start runs app, built for any connector, on a fresh in-process broker
// instead, starts it, and stops it (bounded by 10 s) in t.Cleanup. It
// returns the broker, for its fault hooks and introspection.
func Start(t testing.TB, app *amqpactor.App) *inproc.Broker {
	t.Helper()
	b := inproc.New()
	if err := testhook.ReplaceConnector(app, b); err != nil {
		t.Fatalf("inproctest.Start: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		t.Fatalf("inproctest.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			t.Errorf("inproctest.Start: stopping the app: %v", err)
		}
	})
	return b
}
