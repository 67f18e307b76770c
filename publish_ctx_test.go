package amqpactor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/internal/faketransport"
)

// TestPublishersSharingAContextAllEndWithIt: publishes that nobody answers
// (the link's Send never returns) and that share one context all return
// with it, however they wait for it (a shared context is waited on through
// per-shard channels, internal/ctxdone).
func TestPublishersSharingAContextAllEndWithIt(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	c := &faketransport.Connector{}
	app := amqpactor.New(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	q := amqpactor.Queue("stuck")
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
	entered, release := link.Block()

	shared, stop := context.WithCancel(ctx)
	const publishers = 48
	errs := make(chan error, publishers)
	var wg sync.WaitGroup
	for range publishers {
		// 48 publishes over the 8 shards: the context is seen on each
		// more than once, so most wait on a shard's channel.
		wg.Go(func() { errs <- app.Publish(shared, q, &amqpactor.Message{Body: []byte("x")}) })
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no publish reached the link")
	}
	stop()
	for range publishers {
		select {
		case err := <-errs:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(10 * time.Second):
			t.Fatal("a publish did not return when its context ended")
		}
	}
	wg.Wait()
	release()
	require.NoError(t, app.Stop(ctx))
}
