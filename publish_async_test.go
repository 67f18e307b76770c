package amqpactor_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// inOrder records the bodies (numbers) a handler saw, in handling order.
type inOrder struct {
	mu  sync.Mutex
	got []int
}

func (o *inOrder) handle(_ context.Context, m *amqpactor.Message) error {
	n, _ := strconv.Atoi(string(m.Body))
	o.mu.Lock()
	o.got = append(o.got, n)
	o.mu.Unlock()
	return nil
}

func (o *inOrder) distinct() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := make(map[int]struct{}, len(o.got))
	for _, v := range o.got {
		seen[v] = struct{}{}
	}
	return len(seen)
}

// startPublisherApp starts an App on broker with fn's subscriptions and
// stops it at the end of the test.
func startPublisherApp(t *testing.T, broker *inproc.Broker, sub func(app *amqpactor.App)) (*amqpactor.App, context.Context) {
	t.Helper()
	app := amqpactor.New(broker)
	if sub != nil {
		sub(app)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { require.NoError(t, app.Stop(context.Background())) })
	return app, ctx
}

// One goroutine keeps a window of 256 publishes in flight with
// PublishAsync: every outcome is accepted and every message arrives once,
// in the order published (after a first publish has attached the link).
func TestPublishAsyncWindowFromOneGoroutine(t *testing.T) {
	seen := asyncWindow(t, false)
	seen.mu.Lock()
	defer seen.mu.Unlock()
	require.Equal(t, 10000, len(seen.got), "no duplicates without a fault")
	for i, v := range seen.got {
		if v != i {
			require.Equal(t, i, v, "in the order published")
		}
	}
}

// The same with the links detached twice midway: what the sender had not
// had confirmed goes again on the next link, so nothing is lost; what was
// in flight may come again, after later ones.
func TestPublishAsyncAcrossDetaches(t *testing.T) {
	seen := asyncWindow(t, true)
	seen.mu.Lock()
	defer seen.mu.Unlock()
	t.Logf("published 10000 from one goroutine, handled %d (duplicates %d)", len(seen.got), len(seen.got)-10000)
}

func asyncWindow(t *testing.T, detach bool) *inOrder {
	noLeaks(t)
	broker := inproc.New()
	seen := &inOrder{}
	app, ctx := startPublisherApp(t, broker, func(app *amqpactor.App) {
		_, err := app.Subscribe(amqpactor.Queue("async"), seen.handle, amqpactor.WithPartitions(1))
		require.NoError(t, err)
	})
	// The first publish attaches the sender link: publishes that wait for
	// it may be written after later ones.
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("async"), &amqpactor.Message{Body: []byte("-1")}))
	require.Eventually(t, func() bool { return seen.distinct() == 1 }, 5*time.Second, time.Millisecond)
	seen.mu.Lock()
	seen.got = nil
	seen.mu.Unlock()
	const n, window = 10000, 256
	inflight := make([]*amqpactor.Receipt, 0, window)
	for i := range n {
		if len(inflight) == window {
			require.NoError(t, inflight[0].Wait(ctx))
			inflight = inflight[1:]
		}
		if detach && (i == n/3 || i == 2*n/3) {
			broker.DetachLinks(amqpactor.Queue("async"), "amqp:link:detach-forced", "test")
		}
		inflight = append(inflight, app.PublishAsync(ctx, amqpactor.Queue("async"),
			&amqpactor.Message{Body: []byte(strconv.Itoa(i))}))
	}
	for _, r := range inflight {
		require.NoError(t, r.Wait(ctx))
	}
	require.Eventually(t, func() bool { return seen.distinct() == n }, 20*time.Second, time.Millisecond, "lost none")
	return seen
}

func TestPublishAsyncErrors(t *testing.T) {
	noLeaks(t)
	ctx := context.Background()
	notStarted := amqpactor.New(inproc.New())
	require.ErrorIs(t, notStarted.PublishAsync(ctx, amqpactor.Queue("q"), &amqpactor.Message{}).Wait(ctx), amqpactor.ErrNotStarted)
	//nolint:staticcheck // a nil context is what is tested
	require.ErrorContains(t, notStarted.PublishAsync(nil, amqpactor.Queue("q"), &amqpactor.Message{}).Wait(ctx), "nil")
	require.ErrorContains(t, notStarted.PublishAsync(ctx, amqpactor.Queue("q"), nil).Wait(ctx), "nil")
	var r *amqpactor.Receipt
	require.ErrorContains(t, r.Wait(ctx), "nil")

	broker := inproc.New()
	app, ctx := startPublisherApp(t, broker, nil)
	broker.RejectPublish(amqpactor.Queue("refused"), "amqp:unauthorized-access", "not for you")
	r = app.PublishAsync(ctx, amqpactor.Queue("refused"), &amqpactor.Message{Body: []byte("x")})
	var oe *amqpactor.OutcomeError
	require.ErrorAs(t, r.Wait(ctx), &oe)
	require.Contains(t, oe.Error(), "not for you")

	// Many waiters on one receipt read one outcome.
	r = app.PublishAsync(ctx, amqpactor.Queue("refused"), &amqpactor.Message{Body: []byte("y")})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- r.Wait(ctx) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.ErrorAs(t, err, &oe)
	}
}

// A Wait whose context ends returns that error; the publish goes on and a
// later Wait reads its outcome.
func TestPublishAsyncWaitGivesUp(t *testing.T) {
	noLeaks(t)
	broker := inproc.New()
	seen := &inOrder{}
	app, ctx := startPublisherApp(t, broker, func(app *amqpactor.App) {
		_, err := app.Subscribe(amqpactor.Queue("later"), seen.handle)
		require.NoError(t, err)
	})
	r := app.PublishAsync(ctx, amqpactor.Queue("later"), &amqpactor.Message{Body: []byte("1")})
	gone, cancel := context.WithCancel(ctx)
	cancel()
	err := r.Wait(gone)
	if err != nil { // it may have been answered already
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorContains(t, err, "queue:later")
	}
	require.NoError(t, r.Wait(ctx))
	require.Eventually(t, func() bool { return seen.distinct() == 1 }, 5*time.Second, time.Millisecond)
}

func TestPublishBatch(t *testing.T) {
	noLeaks(t)
	broker := inproc.New()
	seen := &inOrder{}
	app, ctx := startPublisherApp(t, broker, func(app *amqpactor.App) {
		_, err := app.Subscribe(amqpactor.Queue("batch"), seen.handle)
		require.NoError(t, err)
	})
	msgs := make([]*amqpactor.Message, 100)
	for i := range msgs {
		msgs[i] = &amqpactor.Message{Body: []byte(strconv.Itoa(i))}
	}
	require.NoError(t, app.PublishBatch(ctx, amqpactor.Queue("batch"), msgs))
	require.Eventually(t, func() bool { return seen.distinct() == 100 }, 5*time.Second, time.Millisecond)

	broker.RejectPublish(amqpactor.Queue("batch-refused"), "amqp:resource-limit-exceeded", "full")
	msgs[7] = nil
	err := app.PublishBatch(ctx, amqpactor.Queue("batch-refused"), msgs)
	var be *amqpactor.BatchError
	require.ErrorAs(t, err, &be)
	require.Len(t, be.Failed, 100)
	require.ErrorContains(t, be.Failed[7], "nil")
	var oe *amqpactor.OutcomeError
	require.ErrorAs(t, be.Failed[0], &oe)
	require.ErrorAs(t, err, &oe, "errors.As reaches a publish's error")
	require.Contains(t, err.Error(), "100 failed")
}
