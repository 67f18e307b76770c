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

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/test/kit/testproxy"
)

// TestLiveCuts is test/faults' TestLiveCuts on Dial091: 10,000 uniquely
// identified messages published by 16 goroutines to a quorum queue through
// a proxy adding 2 ms of latency, which cuts every connection 3 times,
// spread over the run. Every publish returns nil by its deadline (none is
// retried by the test) and every id is handled; duplicates (resends whose
// confirm was lost, redeliveries whose acknowledgement was) are counted.
func TestLiveCuts(t *testing.T) {
	const n, cuts, workers = 10_000, 3, 16
	const budget = 20 * time.Second // per cut, for the reconnect and for consumption to resume
	raw := livetest.URL(t, "the AMQP 0-9-1 cuts test")
	u, err := url.Parse(raw)
	require.NoError(t, err)
	px := testproxy.New(t, u.Host)
	px.Latency(2 * time.Millisecond)
	u.Host = px.Addr()

	q := amqpactor.Queue(unique("amqp091-cuts"))
	newSide(t, raw).deleteQueue(q.Name())
	var mu sync.Mutex
	counts := map[string]int{}
	var handled atomic.Int64
	distinct := func() int { mu.Lock(); defer mu.Unlock(); return len(counts) }
	app := startApp(t, u.String(), func(app *amqpactor.App) {
		_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
			id, _ := m.MessageID.(string)
			mu.Lock()
			counts[id]++
			mu.Unlock()
			handled.Add(1)
			return nil
		}, amqpactor.WithCredit(256))
		require.NoError(t, err)
	})
	tree := func() *amqpactor.Node {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		root, _ := app.Tree(ctx)
		return root
	}
	treeText := func() string { js, _ := json.MarshalIndent(tree(), "", " "); return string(js) }

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prefix := unique("m")
	ids := make(chan string)
	var confirmed, failed atomic.Int64
	var lastErr atomic.Value
	var wg sync.WaitGroup
	started := time.Now()
	for range workers {
		wg.Go(func() {
			for id := range ids {
				// A generous deadline: a publish under way across a cut waits
				// for the reconnect and its resend, and must not fail.
				pctx, pcancel := context.WithTimeout(ctx, 60*time.Second)
				err := app.Publish(pctx, q, &amqpactor.Message{MessageID: id, Body: []byte(id), Durable: true})
				pcancel()
				if err != nil {
					failed.Add(1)
					lastErr.Store(fmt.Sprint(id, ": ", err))
					continue
				}
				confirmed.Add(1)
			}
		})
	}
	go func() {
		defer close(ids)
		for i := range n {
			select {
			case ids <- fmt.Sprintf("%s-%05d", prefix, i):
			case <-ctx.Done():
				return
			}
		}
	}()

	type result struct {
		conns             int
		reconnect, resume time.Duration
	}
	var results []result
	for k := 1; k <= cuts; k++ {
		at := int64(k * n / (cuts + 1))
		require.Eventually(t, func() bool { return confirmed.Load()+failed.Load() >= at }, 90*time.Second, 5*time.Millisecond,
			"%d publishes returned before cut %d (confirmed %d, failed %d)", at, k, confirmed.Load(), failed.Load())
		conns := px.Cut()
		require.NotZero(t, conns, "connections cut")
		t0 := time.Now()
		require.Eventually(t, func() bool {
			root := tree()
			return root != nil && root.State == "attached" && root.Restarts >= k
		}, budget, 5*time.Millisecond, "reconnect %d within %s:\n%s", k, budget, treeText())
		reconnect := time.Since(t0)
		before := handled.Load()
		require.Eventually(t, func() bool { return handled.Load() > before || distinct() == n }, budget, 5*time.Millisecond,
			"consumption resumes after cut %d:\n%s", k, treeText())
		results = append(results, result{conns, reconnect, time.Since(t0)})
	}
	wg.Wait()
	require.Zero(t, failed.Load(), "publish errors (last: %v)", lastErr.Load())
	require.EqualValues(t, n, confirmed.Load())
	missing := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for i := range n {
			if id := fmt.Sprintf("%s-%05d", prefix, i); counts[id] == 0 {
				out = append(out, id)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return distinct() == n }, 90*time.Second, 10*time.Millisecond,
		"every message handled: %d of %d; missing %v\n%s", distinct(), n, first(missing(), 5), treeText())
	elapsed := time.Since(started)
	lost := len(missing())
	require.Zero(t, lost)

	root := tree()
	require.NotNil(t, root)
	require.GreaterOrEqual(t, root.Restarts, cuts)
	var resent uint64
	var walk func(*amqpactor.Node)
	walk = func(n *amqpactor.Node) {
		if n.Kind == "sender" {
			resent += n.Counters["resent"]
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(root)
	mu.Lock()
	dups := 0
	for _, c := range counts {
		dups += c - 1
	}
	mu.Unlock()
	var maxReconnect, maxResume time.Duration
	for _, r := range results {
		maxReconnect, maxResume = max(maxReconnect, r.reconnect), max(maxResume, r.resume)
	}
	t.Logf("FIGURES %s: published=%d lost=%d duplicates=%d cuts=%d publish_errors=%d resent=%d reconnect_max=%s resume_max=%s budget=%s restarts=%d elapsed=%s",
		t.Name(), n, lost, dups, cuts, failed.Load(), resent, maxReconnect.Round(time.Millisecond),
		maxResume.Round(time.Millisecond), budget, root.Restarts, elapsed.Round(time.Millisecond))
	for i, r := range results {
		t.Logf("cut %d: %d connections, reconnected after %s, consumption resumed after %s", i+1, r.conns, r.reconnect.Round(time.Millisecond), r.resume.Round(time.Millisecond))
	}
}

func first(s []string, n int) []string {
	return s[:min(n, len(s))]
}
