package amqpactor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// A request the broker refuses fails at once with the broker's word and the
// address, not at the caller's deadline; the next one goes through.
func TestRequestRefusedPublishFailsFast(t *testing.T) {
	noLeaks(t)
	conn := inproc.New()
	app, ctx := startResponder(t, conn, func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: append([]byte("re:"), req.Body...)}, nil
	})

	conn.RejectPublish(amqpactor.Queue("rpc"), "amqp:resource-limit-exceeded", "queue full")
	_, err := app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("ping")})
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "the refusal ends the request, not the deadline")
	var oe *amqpactor.OutcomeError
	require.True(t, errors.As(err, &oe), "want an *OutcomeError, got %v", err)
	require.Contains(t, err.Error(), "rpc")
	require.Contains(t, err.Error(), "queue full")

	conn.ClearRejects()
	rep, err := app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("ping")})
	require.NoError(t, err)
	require.Equal(t, "re:ping", string(rep.Body))
}

// Concurrent requests each get their own reply.
func TestRequestsInParallel(t *testing.T) {
	noLeaks(t)
	app, ctx := startResponder(t, inproc.New(), func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: req.Body}, nil
	})

	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Go(func() {
			body := fmt.Sprint(i)
			rep, err := app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte(body)})
			switch {
			case err != nil:
				errs <- err
			case string(rep.Body) != body:
				errs <- fmt.Errorf("request %s got reply %q", body, rep.Body)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A request waiting for its reply when the connection drops fails at once
// with the reason, not at the caller's deadline; once the reply link is
// back, requests go through again.
func TestRequestFailsWhenTheReplyLinkGoes(t *testing.T) {
	noLeaks(t)
	conn := inproc.New()
	held, release := make(chan struct{}, 1), make(chan struct{})
	app, ctx := startResponder(t, conn, func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		if string(req.Body) == "hold" {
			select {
			case held <- struct{}{}:
			default: // redelivered after the reconnect
			}
			select {
			case <-ctx.Done(): // the link went: nobody could take the reply
				return nil, ctx.Err()
			case <-release:
			}
		}
		return &amqpactor.Message{Body: append([]byte("re:"), req.Body...)}, nil
	}, amqpactor.WithBackoff(10*time.Millisecond, 100*time.Millisecond))

	// The first request attaches the reply link; the second one finds it up.
	rep, err := app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("one")})
	require.NoError(t, err)
	require.Equal(t, "re:one", string(rep.Body))

	failed := make(chan error, 1)
	go func() {
		_, err := app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("hold")})
		failed <- err
	}()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the responder never got the request")
	}
	require.Equal(t, 1, conn.DropConnections(errors.New("fault injection: cut")))
	select {
	case err := <-failed:
		require.Error(t, err)
		require.Contains(t, err.Error(), "fault injection: cut")
		require.Contains(t, err.Error(), "rpc")
	case <-ctx.Done():
		t.Fatal("the request waited past the lost reply link")
	}
	require.NoError(t, ctx.Err())
	close(release) // the redelivered request's reply finds no caller

	require.Eventually(t, func() bool {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		rep, err := app.Request(rctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("two")})
		return err == nil && string(rep.Body) == "re:two"
	}, 15*time.Second, 10*time.Millisecond, "requests go through after the reconnect")
}

// startResponder starts an App on conn with respond subscribed to queue
// "rpc" and stops it at the end of the test; ctx bounds the test.
func startResponder(t *testing.T, conn amqpactor.Connector, respond func(context.Context, *amqpactor.Message) (*amqpactor.Message, error), opts ...amqpactor.Option) (*amqpactor.App, context.Context) {
	t.Helper()
	app := amqpactor.New(conn, opts...)
	_, err := app.Subscribe(amqpactor.Queue("rpc"), amqpactor.Responder(respond))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { require.NoError(t, app.Stop(context.Background())) })
	return app, ctx
}

// noLeaks checks, after the test's other cleanups (the App's Stop), that
// no goroutine is left.
func noLeaks(t *testing.T) {
	t.Cleanup(func() {
		goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	})
}
