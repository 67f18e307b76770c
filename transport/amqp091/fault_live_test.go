package amqp091_test

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/internal/livetest"
)

// TestLiveCutRedeliversAndResends: the network under both Apps is cut
// (a TCP proxy closes every connection) while a subscriber holds 4
// deliveries unacknowledged and 20 publishes are under way. Both Apps
// reconnect; the 4 come back marked redelivered with their delivery-count
// raised, every publish returns nil (what was unconfirmed is sent again,
// with the same message-id) and every message is handled.
func TestLiveCutRedeliversAndResends(t *testing.T) {
	raw := livetest.URL(t, "the AMQP 0-9-1 network cut test")
	u, err := url.Parse(raw)
	require.NoError(t, err)
	px := newProxy(t, u.Host)
	u.Host = px.Addr()
	via := u.String()

	q := amqpactor.Queue(unique("amqp091-cut"))
	newSide(t, raw).deleteQueue(q.Name())
	type attempt struct {
		first bool
		count uint32
	}
	var mu sync.Mutex
	attempts := map[string][]attempt{}
	var holding atomic.Int64
	cut := make(chan struct{})
	startApp(t, via, func(app *amqpactor.App) {
		_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
			id := fmt.Sprint(m.MessageID)
			mu.Lock()
			attempts[id] = append(attempts[id], attempt{m.FirstAcquirer, m.DeliveryCount})
			n := len(attempts[id])
			mu.Unlock()
			if n == 1 && len(id) > 4 && id[:5] == "held-" {
				holding.Add(1)
				select { // held, unacknowledged, until the network is cut
				case <-cut:
				case <-ctx.Done():
				}
				return ctx.Err()
			}
			return nil
		}, amqpactor.WithCredit(4), amqpactor.WithPartitions(4))
		require.NoError(t, err)
	})
	pub := startApp(t, via, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for i := range 4 {
		require.NoError(t, pub.Publish(ctx, q, &amqpactor.Message{MessageID: fmt.Sprint("held-", i), Body: []byte("h")}))
	}
	require.Eventually(t, func() bool { return holding.Load() == 4 }, waitFor, 5*time.Millisecond, "4 deliveries held")

	const n = 20
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = pub.Publish(ctx, q, &amqpactor.Message{MessageID: fmt.Sprint("pub-", i), Body: []byte("p")})
		})
	}
	conns := px.Cut()
	close(cut)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "publish %d across the cut", i)
	}
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range 4 {
			if len(attempts[fmt.Sprint("held-", i)]) < 2 {
				return false
			}
		}
		for i := range n {
			if len(attempts[fmt.Sprint("pub-", i)]) == 0 {
				return false
			}
		}
		return true
	}
	require.Eventually(t, done, waitFor, 5*time.Millisecond, "the held deliveries back and every publish handled")
	mu.Lock()
	defer mu.Unlock()
	dups := 0
	for i := range 4 {
		a := attempts[fmt.Sprint("held-", i)]
		require.True(t, a[0].first, "held-%d: first delivery", i)
		require.False(t, a[1].first, "held-%d: redelivered after the cut", i)
		require.GreaterOrEqual(t, a[1].count, uint32(1), "held-%d: delivery-count after the cut", i)
	}
	for i := range n {
		dups += len(attempts[fmt.Sprint("pub-", i)]) - 1
	}
	t.Logf("cut %d connections; 4 of 4 held deliveries redelivered (delivery-count %d..); 20 of 20 publishes returned nil, %d handled twice (resent)",
		conns, attempts["held-0"][1].count, dups)
}
