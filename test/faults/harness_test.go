package faults

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/harness"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// connected reports a root attached after at least restarts reconnects.
func connected(app *amqpactor.App, restarts int) bool {
	n := harness.TreeOr(app)
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
	got := harness.NewTally()
	_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		id, _ := m.MessageID.(string)
		got.Add(id)
		return nil
	}, amqpactor.WithCredit(256))
	require.NoError(t, err)
	harness.StartApp(t, app)

	ctx := harness.Bound(t, 3*time.Minute)
	all := harness.IDs(harness.Unique("m"), n)
	started := time.Now()
	pub := harness.PublishAll(ctx, app, q, all, 16, true)
	var results []cutResult
	for k := 1; k <= cuts; k++ {
		at := int64(k * n / (cuts + 1))
		require.Eventually(t, func() bool { return pub.Confirmed.Load() >= at }, 90*time.Second, 5*time.Millisecond,
			"%d publishes confirmed before cut %d (confirmed %d, errors %d, last %v)", at, k, pub.Confirmed.Load(), pub.Errors.Load(), pub.Err())
		cut()
		t0 := time.Now()
		require.Eventually(t, func() bool { return connected(app, k) }, budget, 5*time.Millisecond,
			"reconnect %d within the budget %s:\n%s", k, budget, harness.TreeText(harness.TreeOr(app)))
		reconnect := time.Since(t0)
		before := got.Total()
		require.Eventually(t, func() bool { return got.Total() > before || got.Distinct() == n }, budget, 5*time.Millisecond,
			"consumption resumes after cut %d:\n%s", k, harness.TreeText(harness.TreeOr(app)))
		results = append(results, cutResult{reconnect: reconnect, resume: time.Since(t0)})
	}
	pub.Wait()
	require.EqualValues(t, n, pub.Confirmed.Load(), "every publish returned nil (last error %v)", pub.Err())
	require.Eventually(t, func() bool { return got.Distinct() == n }, 90*time.Second, 10*time.Millisecond,
		"every message delivered: %d of %d; first missing %v\n%s", got.Distinct(), n, harness.First(got.Missing(all), 5), harness.TreeText(harness.TreeOr(app)))
	elapsed := time.Since(started)
	lost := len(got.Missing(all))
	require.Zero(t, lost)
	root := harness.Tree(t, app)
	require.GreaterOrEqual(t, root.Restarts, cuts, harness.TreeText(root))
	var maxResume, maxReconnect time.Duration
	for _, r := range results {
		maxResume = max(maxResume, r.resume)
		maxReconnect = max(maxReconnect, r.reconnect)
	}
	resent := harness.Sum(root, "sender", "resent")
	t.Logf("FIGURES %s: published=%d lost=%d duplicates=%d cuts=%d publish_errors_retried=%d resent=%d reconnect_max=%s resume_max=%s budget=%s restarts=%d elapsed=%s",
		t.Name(), n, lost, got.Duplicates(), cuts, pub.Errors.Load(), resent, maxReconnect.Round(time.Millisecond),
		maxResume.Round(time.Millisecond), budget, root.Restarts, elapsed.Round(time.Millisecond))
	for i, r := range results {
		t.Logf("cut %d: reconnected after %s, consumption resumed after %s", i+1, r.reconnect.Round(time.Millisecond), r.resume.Round(time.Millisecond))
	}
}
