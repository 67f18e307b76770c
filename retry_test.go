package amqpactor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// A queue argument AMQP cannot encode fails Subscribe, naming the key; a
// valid one is accepted (the in-process broker declares nothing).
func TestQueueArgumentsValidated(t *testing.T) {
	app := amqpactor.New(inproc.New())
	h := func(context.Context, *amqpactor.Message) error { return nil }
	_, err := app.Subscribe(amqpactor.Queue("q"), h, amqpactor.WithQueueArguments(map[string]any{"x-bad": make(chan int)}))
	require.ErrorContains(t, err, `"x-bad"`)
	_, err = app.Subscribe(amqpactor.Queue("q"), h, amqpactor.WithQueueArguments(map[string]any{"x-max-length": 10}))
	require.NoError(t, err)
	_, err = app.Subscribe(amqpactor.Queue("q2"), h, amqpactor.WithRetry(amqpactor.RetryPolicy{Backoff: -1}))
	require.ErrorContains(t, err, "negative backoff")
}

// Run bounds its stop by WithStopTimeout: with a handler that never
// returns, Run returns soon after its context ends (the 30 s default
// would outlast the bound of this test).
func TestRunStopTimeout(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	var once atomic.Bool
	app := amqpactor.New(inproc.New(), amqpactor.WithStopTimeout(200*time.Millisecond))
	_, err := app.Subscribe(amqpactor.Queue("stuck"), func(ctx context.Context, m *amqpactor.Message) error {
		if once.CompareAndSwap(false, true) {
			close(started)
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return errors.New("stopped")
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- app.Run(ctx) }()
	bound, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer bcancel()
	require.Eventually(t, func() bool {
		return app.Publish(bound, amqpactor.Queue("stuck"), &amqpactor.Message{Body: []byte("x")}) == nil
	}, 10*time.Second, 10*time.Millisecond)
	select {
	case <-started:
	case <-bound.Done():
		t.Fatal("the handler never started")
	}
	cancel()
	select {
	case <-ran:
	case <-bound.Done():
		t.Fatal("Run did not return within 10 s of its context ending, with a 200 ms stop timeout")
	}
}
