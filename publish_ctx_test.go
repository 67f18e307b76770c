package amqpactor_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/kit/faketransport"
)

// TestPublishersSharingAContextAllEndWithIt: publishes that nobody answers
// (the link's Send never returns) and that share one context all return
// with it, however they wait for it (a shared context is waited on through
// per-shard channels, or by the table that answers the enlisted publishes,
// internal/ctxdone).
func TestPublishersSharingAContextAllEndWithIt(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	app, q, entered, release := stuckApp(t, ctx)

	// 48 publishes over the 8 shards: the context is seen on each more
	// than once, so most wait on a shard's channel.
	var wg sync.WaitGroup
	endWithTheirContext(t, ctx, app, q, entered, 48, &wg)
	wg.Wait()
	release()
	require.NoError(t, app.Stop(ctx))
}

// TestStopAnswersPublishesNobodyWillAnswer: publishes stuck in the link,
// with a context that never ends and with one shared and cancelled later,
// all return ErrStopped from Stop (the App's ctxdone.Table answers them, as
// they wait on their answer alone), and a publish its context ended is never
// reused while the sender still holds it (the race detector's part).
func TestStopAnswersPublishesNobodyWillAnswer(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	app, q, entered, release := stuckApp(t, ctx)

	// First a shared context that ends: its publishes are answered by the
	// table, and the sender still holds them when they return.
	const publishers = 32
	var wg sync.WaitGroup
	endWithTheirContext(t, ctx, app, q, entered, publishers, &wg)
	errs := make(chan error, publishers)
	// Then publishes whose context never ends, stuck behind those until
	// the App stops: the link never answers, so the stop's bound runs out,
	// and the table answers them then.
	for range publishers {
		wg.Go(func() { errs <- app.Publish(context.Background(), q, &amqpactor.Message{Body: []byte("y")}) })
	}
	require.Eventually(t, func() bool { return waitingIn("amqpactor.(*App).send(") == publishers }, 10*time.Second, time.Millisecond)
	stop, cancelStop := context.WithTimeout(context.Background(), time.Second)
	defer cancelStop()
	stopped := make(chan error, 1)
	go func() { stopped <- app.Stop(stop) }()
	for range publishers {
		select {
		case err := <-errs:
			require.ErrorIs(t, err, amqpactor.ErrStopped)
		case <-time.After(15 * time.Second):
			t.Fatal("a publish did not return when the App stopped")
		}
	}
	wg.Wait()
	require.Error(t, <-stopped, "the link never answered: the stop ran out of time")
	release()
}

// endWithTheirContext runs n publishes to q on one context, waits for the
// first to reach the stuck link, cancels the context and checks that every
// publish returns with it.
func endWithTheirContext(t *testing.T, ctx context.Context, app *amqpactor.App, q amqpactor.Address, entered <-chan struct{}, n int, wg *sync.WaitGroup) {
	t.Helper()
	shared, end := context.WithCancel(ctx)
	errs := make(chan error, n)
	for range n {
		wg.Go(func() { errs <- app.Publish(shared, q, &amqpactor.Message{Body: []byte("x")}) })
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no publish reached the link")
	}
	end()
	for range n {
		select {
		case err := <-errs:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(10 * time.Second):
			t.Fatal("a publish did not return when its context ended")
		}
	}
}

// stuckApp starts an App on a fake connection whose sender to q never
// answers once Block is called, and calls it after one publish went through.
func stuckApp(t *testing.T, ctx context.Context) (app *amqpactor.App, q amqpactor.Address, entered <-chan struct{}, release func()) {
	t.Helper()
	c := &faketransport.Connector{}
	app = amqpactor.New(c)
	require.NoError(t, app.Start(ctx))
	q = amqpactor.Queue("stuck")
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{Body: []byte("first")}))
	var link *faketransport.Sender
	for _, s := range c.Last().Sessions() {
		for _, l := range s.Senders() {
			if l.Address() == "stuck" {
				link = l
			}
		}
	}
	require.NotNil(t, link, "the first publish attached no sender")
	entered, release = link.Block()
	return app, q, entered, release
}

// waitingIn counts the goroutines whose stack has fn in it.
func waitingIn(fn string) int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), fn)
}
