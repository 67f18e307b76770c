package amqpactor_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/debug"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/internal/testhook"
)

// TestNilArguments: every exported function and method of the package (and
// of debug and inproc) given nil where it takes a pointer, a function, an
// interface or a context returns an error, or does nothing, and never
// panics.
func TestNilArguments(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q := amqpactor.Queue("q")
	m := &amqpactor.Message{Body: []byte("x")}
	noop := func(context.Context, *amqpactor.Message) error { return nil }
	var nilCtx context.Context

	b := inproc.New(nil)
	app := amqpactor.New(b, nil, amqpactor.WithName("nil-args"))
	sub, err := app.Subscribe(q, noop, nil)
	require.NoError(t, err, "a nil SubscribeOption is skipped")
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	require.NoError(t, app.Publish(ctx, q, m, nil), "a nil PublishOption is skipped")

	noConnector := amqpactor.New(nil)
	var nilSub *amqpactor.Subscription
	var nilTx *amqpactor.Tx

	// Each call must return an error (and must not panic).
	calls := map[string]func() error{
		"New(nil).Start":     func() error { return noConnector.Start(ctx) },
		"New(nil).Subscribe": func() error { _, err := noConnector.Subscribe(q, noop); return err },
		"New(nil).Publish":   func() error { return noConnector.Publish(ctx, q, m) },
		"New(nil).Request":   func() error { _, err := noConnector.Request(ctx, q, m); return err },
		"New(nil).AsyncAPI":  func() error { _, err := noConnector.AsyncAPI(); return err },
		"New(nil).Tree":      func() error { _, err := noConnector.Tree(ctx); return err },
		"ReplaceConnector(nil)": func() error {
			return testhook.ReplaceConnector(amqpactor.New(inproc.New()), nil)
		},
		"Dial(\"\", nil).Start": func() error {
			return amqpactor.New(amqpactor.Dial("", nil)).Start(ctx)
		},

		"Start(nil ctx)": func() error { return amqpactor.New(inproc.New()).Start(nilCtx) },
		"Stop(nil ctx)":  func() error { return app.Stop(nilCtx) },
		"Run(nil ctx)":   func() error { return amqpactor.New(inproc.New()).Run(nilCtx) },

		"Subscribe(nil handler)":      func() error { _, err := app.Subscribe(q, nil); return err },
		"Subscribe(Responder(nil))":   func() error { _, err := app.Subscribe(q, amqpactor.Responder(nil)); return err },
		"Subscribe(Typed(nil))":       func() error { _, err := app.Subscribe(q, amqpactor.Typed[struct{}](nil)); return err },
		"SubscribeBatch(nil handler)": func() error { _, err := app.SubscribeBatch(q, nil); return err },

		"Publish(nil ctx)":     func() error { return app.Publish(nilCtx, q, m) },
		"Publish(nil message)": func() error { return app.Publish(ctx, q, nil) },
		"Request(nil ctx)":     func() error { _, err := app.Request(nilCtx, q, m); return err },
		"Request(nil message)": func() error { _, err := app.Request(ctx, q, nil); return err },
		"Transaction(nil ctx)": func() error {
			return app.Transaction(nilCtx, func(*amqpactor.Tx) error { return nil })
		},
		"Transaction(nil function)": func() error { return app.Transaction(ctx, nil) },
		"Tx.Publish(nil ctx)": func() error {
			var inner error
			_ = app.Transaction(ctx, func(tx *amqpactor.Tx) error { inner = tx.Publish(nilCtx, q, m); return nil })
			return inner
		},
		"Tx.Publish(nil message)": func() error {
			var inner error
			_ = app.Transaction(ctx, func(tx *amqpactor.Tx) error { inner = tx.Publish(ctx, q, nil); return nil })
			return inner
		},
		"(*Tx)(nil).Publish": func() error { return nilTx.Publish(ctx, q, m) },
		"Tx.Accept(nil message)": func() error {
			var inner error
			_ = app.Transaction(ctx, func(tx *amqpactor.Tx) error { inner = tx.Accept(nil); return nil })
			return inner
		},
		"(*Tx)(nil).Accept": func() error { return nilTx.Accept(m) },
		"Tree(nil ctx)":     func() error { _, err := app.Tree(nilCtx); return err },

		"Subscription.Close(nil ctx)":    func() error { return sub.Close(nilCtx) },
		"(*Subscription)(nil).Close":     func() error { return nilSub.Close(ctx) },
		"Responder(nil) called":          func() error { return amqpactor.Responder(nil)(ctx, &amqpactor.Message{ReplyTo: "r"}) },
		"Typed(nil) called":              func() error { return amqpactor.Typed[struct{}](nil)(ctx, &amqpactor.Message{Body: []byte("{}")}) },
		"debug.WriteTree(nil writer)":    func() error { return debug.WriteTree(nil, &amqpactor.Node{Name: "x"}) },
		"inproc.Broker.Publish(nil msg)": func() error { return b.Publish(q, nil) },
		"debug.Handler(nil)": func() error {
			rec := httptest.NewRecorder()
			debug.Handler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/tree", nil))
			if rec.Code >= 500 {
				return fmt.Errorf("status %d: %s", rec.Code, strings.TrimSpace(rec.Body.String()))
			}
			return nil
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = call() })
			require.Error(t, err)
			t.Log(err)
		})
	}

	// These take nil and answer without an error; they must not panic.
	quiet := map[string]func(){
		"Reject(nil)":                 func() { _ = amqpactor.Reject(nil).Error() },
		"Undeliverable(nil)":          func() { _ = amqpactor.Undeliverable(nil).Error() },
		"(*Subscription)(nil).Pause":  func() { nilSub.Pause() },
		"(*Subscription)(nil).Resume": func() { nilSub.Resume() },
		"(*Subscription)(nil).Name":   func() { _ = nilSub.Name() + nilSub.Address().String() },
		"debug.WriteTree(nil node)":   func() { _ = debug.WriteTree(io.Discard, nil) },
		"New(nil).Stop":               func() { _ = noConnector.Stop(ctx) },
		"options of nil": func() {
			_ = amqpactor.New(inproc.New(), amqpactor.WithLogger(nil), amqpactor.WithActorSystem(nil),
				amqpactor.WithTracerProvider(nil), amqpactor.WithMeterProvider(nil), amqpactor.WithPropagator(nil))
			_ = amqpactor.Dial("amqp://127.0.0.1:1/", amqpactor.WithTLS(nil), amqpactor.WithDialLogger(nil))
		},
	}
	for name, call := range quiet {
		t.Run(name, func(t *testing.T) { require.NotPanics(t, call) })
	}

	// Responder(nil) would have been accepted, and every request would have
	// waited for a reply that never comes: Subscribe says why instead.
	_, err = app.Subscribe(amqpactor.Queue("rpc"), amqpactor.Responder(nil))
	require.ErrorContains(t, err, "Responder(nil)")
}
