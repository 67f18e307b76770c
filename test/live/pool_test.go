package live

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
	"github.com/amqpactor/amqpactor/test/kit/testproxy"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// numberedQueues names the queues prefix.0 to prefix.(n-1), deleted on u
// when the test ends.
func numberedQueues(t *testing.T, u, prefix string, n int) []string {
	queues := make([]string, n)
	for i := range queues {
		queues[i] = fmt.Sprintf("%s.%d", prefix, i)
	}
	t.Cleanup(func() {
		mgmt(t, u, func(ctx context.Context, m *amqpwire.Management) {
			for _, q := range queues {
				require.NoError(t, brokeradmin.DeleteQueue(ctx, m, q))
			}
		})
	})
	return queues
}

// TestPoolOfQueueSubscriptions: RabbitMQ 4 allows 64 sessions on a
// connection and every subscription has one (issue 27). 150 queue
// subscriptions (POOL_SUBSCRIPTIONS=n for another figure) in one App start,
// each handles its message, the tree shows the pool's connections, and the
// App stops cleanly (TestMain's goleak). It logs the start time and the
// goroutines and heap per subscription that docs/BENCHMARKS.md reports.
func TestPoolOfQueueSubscriptions(t *testing.T) {
	u := brokerURL(t)
	n := 150
	if v, err := strconv.Atoi(os.Getenv("POOL_SUBSCRIPTIONS")); err == nil && v > 0 {
		n = v
	}
	prefix := unique("pool")
	queues := numberedQueues(t, u, prefix, n)
	app := amqpactor.New(amqpactor.Dial(u, amqpactor.WithDialect(amqpactor.RabbitMQ4)), amqpactor.WithName(prefix))
	var mu sync.Mutex
	seen := map[string]int{}
	for _, q := range queues {
		_, err := app.Subscribe(amqpactor.Queue(q), func(context.Context, *amqpactor.Message) error {
			mu.Lock()
			seen[q]++
			mu.Unlock()
			return nil
		}, amqpactor.WithClassicQueue(), amqpactor.WithPartitions(1))
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	began := time.Now()
	require.NoError(t, app.Start(ctx))
	started := time.Since(began)
	stopped := false
	defer func() {
		if !stopped {
			_ = app.Stop(ctx)
		}
	}()
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("%d subscriptions: Start %v, %.1f goroutines and %.0f KiB heap per subscription", n, started.Round(time.Millisecond),
		float64(runtime.NumGoroutine()-g0)/float64(n), float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/1024/float64(n))

	for _, q := range queues {
		require.NoError(t, app.Publish(ctx, amqpactor.Queue(q), &amqpactor.Message{Body: []byte("x")}))
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == n
	}, 2*time.Minute, 20*time.Millisecond)

	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	require.Equal(t, "connection", tree.Name)
	conns := 0
	var walk func(*amqpactor.Node)
	walk = func(nd *amqpactor.Node) {
		if nd.Kind == "connection" {
			conns++
		}
		for _, c := range nd.Children {
			walk(c)
		}
	}
	walk(tree)
	require.GreaterOrEqual(t, conns, (n+63)/64, "%d sessions need connections of 64", n)
	require.Eventually(t, func() bool { return app.Ready() == nil }, 30*time.Second, 20*time.Millisecond)
	stopped = true
	began = time.Now()
	require.NoError(t, app.Stop(ctx))
	t.Logf("%d connections; Stop %v", conns, time.Since(began).Round(time.Millisecond))
}

// TestPoolProxyCutOf100Subscriptions: 100 queue subscriptions (two pooled
// connections) consume through a proxy that cuts every connection while
// 2,000 messages are published around it (by another App, straight to the
// broker): every connection of the pool reconnects on its own and nothing
// is lost.
func TestPoolProxyCutOf100Subscriptions(t *testing.T) {
	raw := brokerURL(t)
	u, err := url.Parse(raw)
	require.NoError(t, err)
	px := testproxy.New(t, u.Host)
	u.Host = px.Addr()
	const n, per = 100, 20
	prefix := unique("poolcut")
	queues := numberedQueues(t, raw, prefix, n)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var mu sync.Mutex
	counts := map[string]int{}
	distinct := func() int { mu.Lock(); defer mu.Unlock(); return len(counts) }
	consumer := amqpactor.New(amqpactor.Dial(u.String(), amqpactor.WithDialect(amqpactor.RabbitMQ4)),
		amqpactor.WithName(prefix), amqpactor.WithBackoff(50*time.Millisecond, time.Second))
	for _, q := range queues {
		_, err := consumer.Subscribe(amqpactor.Queue(q), func(_ context.Context, m *amqpactor.Message) error {
			id, _ := m.MessageID.(string)
			mu.Lock()
			counts[id]++
			mu.Unlock()
			return nil
		}, amqpactor.WithClassicQueue(), amqpactor.WithPartitions(1))
		require.NoError(t, err)
	}
	require.NoError(t, consumer.Start(ctx))
	defer func() { require.NoError(t, consumer.Stop(ctx)) }()
	producer := amqpactor.New(amqpactor.Dial(raw, amqpactor.WithDialect(amqpactor.RabbitMQ4)), amqpactor.WithName(prefix+"-producer"))
	require.NoError(t, producer.Start(ctx))
	defer func() { require.NoError(t, producer.Stop(ctx)) }()

	publish := func(round int) {
		for _, q := range queues {
			id := fmt.Sprintf("%s/%d", q, round)
			require.NoError(t, producer.Publish(ctx, amqpactor.Queue(q), &amqpactor.Message{MessageID: id, Body: []byte(id)}))
		}
	}
	for r := range per / 2 {
		publish(r)
	}
	require.Eventually(t, func() bool { return distinct() >= n }, time.Minute, 10*time.Millisecond)
	began := time.Now()
	cut := px.Cut()
	require.GreaterOrEqual(t, cut, 2, "the pool's connections go through the proxy")
	for r := per / 2; r < per; r++ {
		publish(r)
	}
	require.Eventually(t, func() bool { return distinct() == n*per }, 2*time.Minute, 10*time.Millisecond,
		"lost: some published ids were never handled")
	tree, err := consumer.Tree(ctx)
	require.NoError(t, err)
	var walk func(*amqpactor.Node)
	conns := 0
	walk = func(nd *amqpactor.Node) {
		if nd.Kind == "connection" {
			conns++
			require.GreaterOrEqual(t, nd.Counters["reconnects"], uint64(1), "%s reconnected", nd.Name)
		}
		for _, c := range nd.Children {
			walk(c)
		}
	}
	walk(tree)
	mu.Lock()
	dups := 0
	for _, c := range counts {
		dups += c - 1
	}
	mu.Unlock()
	t.Logf("%d subscriptions on %d connections, %d cut: published %d, lost 0, duplicates %d, all handled %v after the cut",
		n, conns, cut, n*per, dups, time.Since(began).Round(time.Millisecond))
}

// TestPoolRequestBesideAFullConnection: a Request (its reply receiver's
// session) and publishes beside 70 subscriptions neither close the
// connection nor wait: the first connection keeps room for them.
func TestPoolRequestBesideAFullConnection(t *testing.T) {
	u := brokerURL(t)
	prefix := unique("poolrpc")
	var queues []string
	for i := range 70 {
		queues = append(queues, fmt.Sprintf("%s.%d", prefix, i))
	}
	rpc := prefix + ".rpc"
	t.Cleanup(func() {
		mgmt(t, u, func(ctx context.Context, m *amqpwire.Management) {
			for _, q := range append(queues, rpc) {
				require.NoError(t, brokeradmin.DeleteQueue(ctx, m, q))
			}
		})
	})
	app := amqpactor.New(amqpactor.Dial(u, amqpactor.WithDialect(amqpactor.RabbitMQ4)), amqpactor.WithName(prefix))
	for _, q := range queues {
		_, err := app.Subscribe(amqpactor.Queue(q), func(context.Context, *amqpactor.Message) error { return nil },
			amqpactor.WithClassicQueue(), amqpactor.WithPartitions(1))
		require.NoError(t, err)
	}
	_, err := app.Subscribe(amqpactor.Queue(rpc), amqpactor.Responder(func(_ context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: req.Body}, nil
	}), amqpactor.WithClassicQueue())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	for i := range 5 {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		reply, err := app.Request(rctx, amqpactor.Queue(rpc), &amqpactor.Message{Body: []byte(strconv.Itoa(i))})
		rcancel()
		require.NoError(t, err)
		require.Equal(t, strconv.Itoa(i), string(reply.Body))
	}
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	require.Zero(t, tree.Counters["reconnects"], "the first connection was never lost")
	require.NoError(t, app.Ready())
}
