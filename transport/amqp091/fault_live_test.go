package amqp091_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/test/kit/testproxy"
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
	px := testproxy.New(t, u.Host)
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

// TestLiveSilentBroker: a broker that goes silent without closing anything
// (the proxy drops every byte) is given up on after WithIdleTimeout (three
// missed heartbeats), and the App reconnects once it answers again.
func TestLiveSilentBroker(t *testing.T) {
	raw := livetest.URL(t, "the AMQP 0-9-1 silent broker test")
	u, err := url.Parse(raw)
	require.NoError(t, err)
	px := testproxy.New(t, u.Host)
	u.Host = px.Addr()
	q := amqpactor.Queue(unique("amqp091-silent"))
	newSide(t, raw).deleteQueue(q.Name())
	var got sync.Map // body -> true: at least once, so "before" may come twice
	seen := func(body string) bool { _, ok := got.Load(body); return ok }
	app := startApp(t, u.String(), func(app *amqpactor.App) {
		_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error { got.Store(string(m.Body), true); return nil })
		require.NoError(t, err)
	}, amqpactor.WithIdleTimeout(3*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{Body: []byte("before")}))
	require.Eventually(t, func() bool { return seen("before") }, waitFor, 5*time.Millisecond)

	px.BlackHole(true)
	begin := time.Now()
	var why string
	require.Eventually(t, func() bool {
		tree, err := app.Tree(ctx)
		if err == nil && tree.Restarts > 0 {
			why = tree.LastError
			return true
		}
		return false
	}, waitFor, 20*time.Millisecond, "the silent connection given up on")
	gaveUp := time.Since(begin)
	px.BlackHole(false)
	px.Cut() // what the silent connections left behind
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{Body: []byte("after")}))
	if !assert.Eventually(t, func() bool { return seen("after") }, waitFor, 5*time.Millisecond, "a message after the reconnect") {
		tree, _ := app.Tree(context.Background())
		js, _ := json.MarshalIndent(tree, "", " ")
		t.Fatalf("the tree: %s", js)
	}
	t.Logf("a silent broker given up on after %v with WithIdleTimeout(3s): %s", gaveUp.Round(100*time.Millisecond), why)
}
