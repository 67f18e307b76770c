package faults

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/test/harness"
	"github.com/amqpactor/amqpactor/transport"
)

// backoff of every test App: short, so that the budgets below are a few
// backoffs plus attach time under -race on two cores.
const (
	backoffInitial = 50 * time.Millisecond
	backoffMax     = time.Second
)

func inprocApp(t *testing.T, c amqpactor.Connector) (*amqpactor.App, *harness.LogBuffer) {
	log, buf := harness.NewLog(t)
	return amqpactor.New(c, amqpactor.WithLogger(log), amqpactor.WithBackoff(backoffInitial, backoffMax)), buf
}

// TestInprocCuts: 10,000 uniquely identified messages published by 16
// goroutines while the in-process broker drops the connection 3 times.
func TestInprocCuts(t *testing.T) {
	b := inproc.New()
	app, _ := inprocApp(t, b)
	cutScenario(t, app, amqpactor.Queue("cuts"), 10_000, 3, 15*time.Second, func() {
		require.Equal(t, 1, b.DropConnections(errors.New("fault injection: cut")))
	})
	require.Eventually(t, func() bool { return b.QueueDepth("cuts") == 0 && b.Unsettled("cuts") == 0 }, 10*time.Second, 10*time.Millisecond)
}

// TestInprocLinkDetachMidStream: the broker detaches the sender and the
// receiver links (not the connection) 3 times while 10,000 messages flow.
func TestInprocLinkDetachMidStream(t *testing.T) {
	b := inproc.New()
	app, _ := inprocApp(t, b)
	q := amqpactor.Queue("detach")
	detaches := 0
	cutScenarioLinks(t, app, b, q, &detaches)
}

// cutScenarioLinks is cutScenario with link detaches instead of cuts: the
// connection never restarts, the links do.
func cutScenarioLinks(t *testing.T, app *amqpactor.App, b *inproc.Broker, q amqpactor.Address, detaches *int) {
	const n, cuts = 10_000, 3
	got := harness.NewTally()
	_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		got.Add(m.MessageID.(string))
		return nil
	})
	require.NoError(t, err)
	harness.StartApp(t, app)
	ctx := harness.Bound(t, 2*time.Minute)
	all := harness.IDs(harness.Unique("d"), n)
	pub := harness.PublishAll(ctx, app, q, all, 16, true)
	var maxResume time.Duration
	for k := 1; k <= cuts; k++ {
		at := int64(k * n / (cuts + 1))
		require.Eventually(t, func() bool { return pub.Confirmed.Load() >= at }, 60*time.Second, 5*time.Millisecond)
		require.NotZero(t, b.DetachLinks(q, "amqp:internal-error", "fault injection: detach"))
		*detaches++
		t0 := time.Now()
		before := got.Total()
		require.Eventually(t, func() bool {
			r := harness.OfKind(harness.TreeOr(app), "receiver")
			return len(r) == 1 && r[0].State == "attached" && r[0].Restarts >= k
		}, 15*time.Second, 5*time.Millisecond, "the receiver re-attached:\n%s", harness.TreeText(harness.TreeOr(app)))
		require.Eventually(t, func() bool { return got.Total() > before || got.Distinct() == n }, 15*time.Second, 5*time.Millisecond)
		maxResume = max(maxResume, time.Since(t0))
	}
	pub.Wait()
	require.EqualValues(t, n, pub.Confirmed.Load())
	require.Eventually(t, func() bool { return got.Distinct() == n }, 60*time.Second, 10*time.Millisecond)
	root := harness.Tree(t, app)
	r := harness.OfKind(root, "receiver")[0]
	require.Equal(t, 0, root.Restarts, "the connection never restarted:\n%s", harness.TreeText(root))
	require.GreaterOrEqual(t, r.Restarts, cuts)
	require.Contains(t, r.LastError, "fault injection: detach")
	t.Logf("FIGURES %s: published=%d lost=%d duplicates=%d detaches=%d publish_errors_retried=%d resume_max=%s receiver_restarts=%d late_dispositions_dropped=%d",
		t.Name(), n, len(got.Missing(all)), got.Duplicates(), *detaches, pub.Errors.Load(), maxResume.Round(time.Millisecond), r.Restarts, r.Counters["late"])
}

// TestInprocQueueDeleted: the queue under a subscriber goes away (its
// links are detached with amqp:resource-deleted and every re-attach is
// refused with amqp:not-found until it is back). The error is in the tree
// and the log, the re-attaches are bounded by the backoff, and consumption
// resumes once the queue is back.
func TestInprocQueueDeleted(t *testing.T) {
	b := inproc.New()
	app, logs := inprocApp(t, b)
	q := amqpactor.Queue("deleted")
	got := harness.NewTally()
	_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error { got.Add(m.MessageID.(string)); return nil })
	require.NoError(t, err)
	harness.StartApp(t, app)
	ctx := harness.Bound(t, time.Minute)
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{MessageID: "before"}))
	require.Eventually(t, func() bool { return got.Has("before") }, 10*time.Second, 5*time.Millisecond)

	b.RefuseAttach(q, "amqp:not-found", "fault injection: no queue")
	deleted := time.Now()
	require.NotZero(t, b.DetachLinks(q, "amqp:resource-deleted", "fault injection: queue deleted"))
	var seen *amqpactor.Node
	require.Eventually(t, func() bool {
		r := harness.OfKind(harness.TreeOr(app), "receiver")
		if len(r) == 1 && strings.Contains(r[0].LastError, "no queue") {
			seen = r[0]
			return true
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "the refusal in the tree")
	require.Contains(t, logs.String(), "fault injection: queue deleted", "the link error in the log")
	require.Contains(t, logs.String(), "no queue", "the refusal in the log")
	// Terminal refusals are retried after the longest backoff only, so the
	// receiver cannot spin; the queue is back within that window.
	b.ClearRefusals()
	require.Eventually(t, func() bool {
		r := harness.OfKind(harness.TreeOr(app), "receiver")
		return len(r) == 1 && r[0].State == "attached"
	}, 10*time.Second, 5*time.Millisecond, "re-attached once the queue is back")
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{MessageID: "after"}))
	require.Eventually(t, func() bool { return got.Has("after") }, 10*time.Second, 5*time.Millisecond)
	resumed := time.Since(deleted)
	root := harness.Tree(t, app)
	r := harness.OfKind(root, "receiver")[0]
	// One restart for the detach; refusals are counted as attempts, each
	// after the longest backoff: at most TerminalRetries of them.
	require.LessOrEqual(t, r.Restarts, 3, harness.TreeText(root))
	t.Logf("FIGURES %s: lost=0 refusal_in_tree=%q receiver_restarts=%d resumed_after=%s (terminal refusals retried after backoff max %s)",
		t.Name(), seen.LastError, r.Restarts, resumed.Round(time.Millisecond), backoffMax)
}

// TestInprocRefusedForever: an attach refused with amqp:unauthorized-access
// is terminal: after a bounded number of attempts the receiver and its
// subscription go to state failed, with the error, and stop trying.
func TestInprocRefusedForever(t *testing.T) {
	b := inproc.New()
	app, logs := inprocApp(t, b)
	q := amqpactor.Queue("forbidden")
	sub, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	harness.StartApp(t, app)
	b.RefuseAttach(q, "amqp:unauthorized-access", "fault injection: forbidden")
	require.Equal(t, 1, b.DetachLinks(q, "amqp:internal-error", "fault injection: detach"))
	t0 := time.Now()
	require.Eventually(t, func() bool {
		s := harness.OfKind(harness.TreeOr(app), "subscription")
		return len(s) == 1 && s[0].State == "failed"
	}, 30*time.Second, 10*time.Millisecond, "the subscription failed")
	failedAfter := time.Since(t0)
	root := harness.Tree(t, app)
	r := harness.OfKind(root, "receiver")[0]
	require.Equal(t, "failed", r.State, harness.TreeText(root))
	require.Contains(t, r.LastError, "forbidden")
	require.Contains(t, logs.String(), "gave up re-attaching")
	// No further attempt: the receiver node stays as it is.
	require.Never(t, func() bool {
		r2 := harness.OfKind(harness.TreeOr(app), "receiver")
		return len(r2) != 1 || r2[0].State != "failed"
	}, 3*backoffMax, 50*time.Millisecond)
	require.Equal(t, "forbidden", sub.Address().Name())
	t.Logf("FIGURES %s: failed_after=%s attempts=%d state=%s last_error=%q", t.Name(), failedAfter.Round(time.Millisecond), 1+3, r.State, r.LastError)
}

// refusingConnector wraps a broker: while refuse is set, Connect fails with
// a terminal error, as refused credentials do.
type refusingConnector struct {
	*inproc.Broker
	refuse   atomic.Bool
	attempts atomic.Int64
}

type authError struct{}

func (authError) Error() string  { return "fault injection: authentication failed" }
func (authError) Terminal() bool { return true }

func (c *refusingConnector) Connect(ctx context.Context) (transport.Conn, error) {
	c.attempts.Add(1)
	if c.refuse.Load() {
		return nil, authError{}
	}
	return c.Broker.Connect(ctx)
}

func (c *refusingConnector) Dialect() address.Dialect { return c.Broker.Dialect() }

// TestInprocAuthFailureTerminal: the connection is lost and every reconnect
// is refused as with wrong credentials: the connection tries a bounded
// number of times, then stays failed with the error in the tree and log.
func TestInprocAuthFailureTerminal(t *testing.T) {
	c := &refusingConnector{Broker: inproc.New()}
	app, logs := inprocApp(t, c)
	harness.StartApp(t, app)
	c.refuse.Store(true)
	before := c.attempts.Load()
	require.Equal(t, 1, c.DropConnections(errors.New("fault injection: cut")))
	require.Eventually(t, func() bool { n := harness.TreeOr(app); return n != nil && n.State == "failed" }, 30*time.Second, 10*time.Millisecond)
	attempts := c.attempts.Load() - before
	root := harness.Tree(t, app)
	require.Contains(t, root.LastError, "authentication failed")
	require.Contains(t, logs.String(), "giving up reconnecting")
	require.Never(t, func() bool { return c.attempts.Load()-before != attempts }, 3*backoffMax, 50*time.Millisecond, "no attempt after failing")
	ctx := harness.Bound(t, 10*time.Second)
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	require.Error(t, app.Publish(pctx, amqpactor.Queue("x"), &amqpactor.Message{}))
	require.Less(t, time.Since(t0), 2*time.Second, "a publish returns by its deadline")
	t.Logf("FIGURES %s: reconnect_attempts=%d state=%s last_error=%q", t.Name(), attempts, root.State, root.LastError)
}

// TestInprocPanicsAndPoison: handlers that panic and messages that can
// never be handled do not stop the others: with MaxDeliveries 3 they end
// as dead letters, everything else is accepted, and after Stop nothing is
// left running (goleak, TestMain).
func TestInprocPanicsAndPoison(t *testing.T) {
	b := inproc.New()
	app, _ := inprocApp(t, b)
	q := amqpactor.Queue("poison")
	const n = 2000
	got := harness.NewTally()
	var panics, poison atomic.Int64
	_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		id := m.MessageID.(string)
		switch {
		case strings.HasSuffix(id, "0"):
			panics.Add(1)
			panic("fault injection: handler panic on " + id)
		case strings.HasSuffix(id, "5"):
			poison.Add(1)
			return errors.New("fault injection: poison")
		}
		got.Add(id)
		return nil
	}, amqpactor.WithRetry(amqpactor.RetryPolicy{MaxDeliveries: 3}), amqpactor.WithPartitions(4))
	require.NoError(t, err)
	harness.StartApp(t, app)
	ctx := harness.Bound(t, time.Minute)
	all := harness.IDs("p", n)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{MessageID: all[i]}))
			}
		}()
	}
	wg.Wait()
	good := n - n/10 - n/10
	require.Eventually(t, func() bool { return got.Distinct() == good }, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return len(b.DeadLetters("poison")) == n/5 }, 30*time.Second, 10*time.Millisecond)
	root := harness.Tree(t, app)
	r := harness.OfKind(root, "receiver")[0]
	require.Equal(t, "attached", r.State)
	t.Logf("FIGURES %s: messages=%d handled=%d panics=%d poison_failures=%d dead_lettered=%d accepted=%d rejected=%d modified=%d",
		t.Name(), n, got.Distinct(), panics.Load(), poison.Load(), len(b.DeadLetters("poison")),
		r.Counters["accepted"], r.Counters["rejected"], r.Counters["modified"])
}
