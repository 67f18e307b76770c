package faults

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

func unique(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "." + hex.EncodeToString(b[:])
}

// bound is the context of a whole test.
func bound(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// logBuffer collects the App's log; it is printed when the test fails.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newLog(t *testing.T) (*slog.Logger, *logBuffer) {
	buf := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("App log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo})), buf
}

// startApp starts app and stops it (bounded) when the test ends; Stop must
// return nil or a bounded error, never hang.
func startApp(t *testing.T, app *amqpactor.App) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { stopApp(t, app) })
}

func stopApp(t *testing.T, app *amqpactor.App) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err := app.Stop(ctx)
	require.Less(t, time.Since(start), 21*time.Second, "Stop returned by its deadline")
	if err != nil {
		t.Logf("Stop: %v", err)
	}
}

// tally counts deliveries by message-id.
type tally struct {
	mu     sync.Mutex
	counts map[string]int
	total  atomic.Int64
}

func newTally() *tally { return &tally{counts: map[string]int{}} }

func (t *tally) add(id string) {
	t.mu.Lock()
	t.counts[id]++
	t.mu.Unlock()
	t.total.Add(1)
}

func (t *tally) distinct() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.counts)
}

func (t *tally) has(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts[id] > 0
}

// missing returns the ids never delivered.
func (t *tally) missing(ids []string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, id := range ids {
		if t.counts[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

func (t *tally) duplicates() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.counts {
		n += c - 1
	}
	return n
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return out
}

// publisher publishes ids from several goroutines. A Publish that fails is
// retried by the application (counted), so every id is eventually published
// with a nil return; the runtime must then never lose it.
type publisher struct {
	confirmed atomic.Int64
	errors    atomic.Int64
	wg        sync.WaitGroup
	mu        sync.Mutex
	lastErr   error
}

func publishAll(ctx context.Context, app *amqpactor.App, q amqpactor.Address, all []string, workers int) *publisher {
	p := &publisher{}
	ch := make(chan string)
	for range workers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for id := range ch {
				for ctx.Err() == nil {
					pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
					err := app.Publish(pctx, q, &amqpactor.Message{MessageID: id, Body: []byte(id), Durable: true})
					cancel()
					if err == nil {
						p.confirmed.Add(1)
						break
					}
					p.errors.Add(1)
					p.mu.Lock()
					p.lastErr = err
					p.mu.Unlock()
				}
			}
		}()
	}
	go func() {
		defer close(ch)
		for _, id := range all {
			select {
			case ch <- id:
			case <-ctx.Done():
				return
			}
		}
	}()
	return p
}

func (p *publisher) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// tree returns the App's tree, failing the test on error.
func tree(t *testing.T, app *amqpactor.App) *amqpactor.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := app.Tree(ctx)
	require.NoError(t, err)
	return n
}

func treeOr(app *amqpactor.App) *amqpactor.Node {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, _ := app.Tree(ctx)
	return n
}

func ofKind(n *amqpactor.Node, kind string) []*amqpactor.Node {
	if n == nil {
		return nil
	}
	var out []*amqpactor.Node
	if n.Kind == kind {
		out = append(out, n)
	}
	for _, c := range n.Children {
		out = append(out, ofKind(c, kind)...)
	}
	return out
}

func treeText(n *amqpactor.Node) string {
	var b strings.Builder
	var walk func(n *amqpactor.Node, depth int)
	walk = func(n *amqpactor.Node, depth int) {
		keys := make([]string, 0, len(n.Counters))
		for k := range n.Counters {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var cs []string
		for _, k := range keys {
			cs = append(cs, fmt.Sprintf("%s=%d", k, n.Counters[k]))
		}
		fmt.Fprintf(&b, "%s%s [%s] state=%s restarts=%d err=%q %s\n", strings.Repeat("  ", depth), n.Name, n.Kind,
			n.State, n.Restarts, n.LastError, strings.Join(cs, " "))
		for _, c := range n.Children {
			walk(c, depth+1)
		}
	}
	if n != nil {
		walk(n, 0)
	}
	return b.String()
}

// connected reports a root attached after at least restarts reconnects.
func connected(app *amqpactor.App, restarts int) bool {
	n := treeOr(app)
	return n != nil && n.State == "attached" && n.Restarts >= restarts
}

// cutResult is what one cut measured.
type cutResult struct {
	reconnect, resume time.Duration
}

// cutScenario publishes n uniquely identified messages from several
// goroutines while cut() ends the connection `cuts` times, each after
// another share of the publishes is confirmed, and checks that nothing
// published is lost. It returns the figures.
func cutScenario(t *testing.T, app *amqpactor.App, q amqpactor.Address, n, cuts int, budget time.Duration, cut func()) {
	got := newTally()
	_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		id, _ := m.MessageID.(string)
		got.add(id)
		return nil
	}, amqpactor.WithCredit(256))
	require.NoError(t, err)
	startApp(t, app)

	ctx := bound(t, 3*time.Minute)
	all := ids(unique("m"), n)
	started := time.Now()
	pub := publishAll(ctx, app, q, all, 16)
	var results []cutResult
	for k := 1; k <= cuts; k++ {
		at := int64(k * n / (cuts + 1))
		require.Eventually(t, func() bool { return pub.confirmed.Load() >= at }, 90*time.Second, 5*time.Millisecond,
			"%d publishes confirmed before cut %d (confirmed %d, errors %d, last %v)", at, k, pub.confirmed.Load(), pub.errors.Load(), pub.err())
		cut()
		t0 := time.Now()
		require.Eventually(t, func() bool { return connected(app, k) }, budget, 5*time.Millisecond,
			"reconnect %d within the budget %s:\n%s", k, budget, treeText(treeOr(app)))
		reconnect := time.Since(t0)
		before := got.total.Load()
		require.Eventually(t, func() bool { return got.total.Load() > before || got.distinct() == n }, budget, 5*time.Millisecond,
			"consumption resumes after cut %d:\n%s", k, treeText(treeOr(app)))
		results = append(results, cutResult{reconnect: reconnect, resume: time.Since(t0)})
	}
	pub.wg.Wait()
	require.EqualValues(t, n, pub.confirmed.Load(), "every publish returned nil (last error %v)", pub.err())
	require.Eventually(t, func() bool { return got.distinct() == n }, 90*time.Second, 10*time.Millisecond,
		"every message delivered: %d of %d; first missing %v\n%s", got.distinct(), n, first(got.missing(all), 5), treeText(treeOr(app)))
	elapsed := time.Since(started)
	lost := len(got.missing(all))
	require.Zero(t, lost)
	root := tree(t, app)
	require.GreaterOrEqual(t, root.Restarts, cuts, treeText(root))
	var maxResume, maxReconnect time.Duration
	for _, r := range results {
		maxResume = max(maxResume, r.resume)
		maxReconnect = max(maxReconnect, r.reconnect)
	}
	resent := uint64(0)
	for _, s := range ofKind(root, "sender") {
		resent += s.Counters["resent"]
	}
	t.Logf("FIGURES %s: published=%d lost=%d duplicates=%d cuts=%d publish_errors_retried=%d resent=%d reconnect_max=%s resume_max=%s budget=%s restarts=%d elapsed=%s",
		t.Name(), n, lost, got.duplicates(), cuts, pub.errors.Load(), resent, maxReconnect.Round(time.Millisecond),
		maxResume.Round(time.Millisecond), budget, root.Restarts, elapsed.Round(time.Millisecond))
	for i, r := range results {
		t.Logf("cut %d: reconnected after %s, consumption resumed after %s", i+1, r.reconnect.Round(time.Millisecond), r.resume.Round(time.Millisecond))
	}
}

func first(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
