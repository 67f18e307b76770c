package amqp091_test

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/test/kit/testproxy"
)

// TestLiveBatchCappedByPrefetch: a batch handler never gets more than its
// window (prefetch = credit), however large the batch size it asks for.
func TestLiveBatchCappedByPrefetch(t *testing.T) {
	u := livetest.URL(t, "the AMQP 0-9-1 batch-by-prefetch test")
	q := amqpactor.Queue(unique("amqp091-batch"))
	newSide(t, u).deleteQueue(q.Name())
	var mu sync.Mutex
	var sizes []int
	handled := 0
	startApp(t, u, func(app *amqpactor.App) {
		_, err := app.SubscribeBatch(q, func(_ context.Context, ms []*amqpactor.Message) error {
			mu.Lock()
			sizes = append(sizes, len(ms))
			handled += len(ms)
			mu.Unlock()
			return nil
		}, amqpactor.WithCredit(2), amqpactor.WithBatch(10, 200*time.Millisecond))
		require.NoError(t, err)
	})
	pub := startApp(t, u, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	const n = 30
	for i := range n {
		require.NoError(t, pub.Publish(ctx, q, &amqpactor.Message{MessageID: fmt.Sprint("b", i), Body: []byte("b")}))
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return handled >= n
	}, waitFor, 5*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, s := range sizes {
		require.LessOrEqual(t, s, 2, "a batch of %d past the window of 2: %v", s, sizes)
	}
	t.Logf("batch sizes with a window of 2 and a batch size of 10: %v", sizes)
}

// TestLiveCutBeforeCommitPublishesNothing: the connection is cut while a
// transaction has published 100 messages and not committed: the
// transaction fails and none of them ever reaches the queue.
func TestLiveCutBeforeCommitPublishesNothing(t *testing.T) {
	raw := livetest.URL(t, "the AMQP 0-9-1 cut-before-commit test")
	pu, err := url.Parse(raw)
	require.NoError(t, err)
	px := testproxy.New(t, pu.Host)
	pu.Host = px.Addr()
	q := amqpactor.Queue(unique("amqp091-txcut"))
	s := newSide(t, raw)
	s.deleteQueue(q.Name())
	app := startApp(t, pu.String(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	// The queue exists (declared by a publish outside the transaction).
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{MessageID: "before", Body: []byte("x")}))
	const n = 100
	err = app.Transaction(ctx, func(tx *amqpactor.Tx) error {
		for i := range n {
			if err := tx.Publish(ctx, q, &amqpactor.Message{MessageID: fmt.Sprint("t", i), Body: []byte("t")}); err != nil {
				return err
			}
		}
		require.NotZero(t, px.Cut(), "connections cut before the commit")
		return nil
	})
	require.Error(t, err, "the commit cannot succeed on a cut connection")
	t.Logf("the transaction failed: %v", err)
	// Nothing of it ever arrives: a publish after it, once confirmed, is
	// behind anything the transaction could have enqueued.
	require.Eventually(t, func() bool {
		return app.Publish(ctx, q, &amqpactor.Message{MessageID: "after", Body: []byte("x")}) == nil
	}, waitFor, 50*time.Millisecond, "the App reconnects")
	require.Equal(t, 2, s.depth(q.Name()), "only the publishes outside the transaction")
}
