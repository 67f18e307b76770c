package cluster

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/harness"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
	"github.com/amqpactor/amqpactor/test/kit/clusterctl"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

const (
	backoffInitial = 50 * time.Millisecond
	backoffMax     = time.Second
	// failoverBudget bounds the wait for the App to be attached to another
	// node and consuming again; the figure measured is logged, not asserted.
	failoverBudget = 60 * time.Second
	publishTimeout = harness.PublishTimeout
)

// nodes returns the cluster's three AMQP URLs (AMQP_CLUSTER_URLS, space
// separated); without them, or without root to kill nodes, the test is
// Missing the cluster.
func nodes(t *testing.T) []string {
	t.Helper()
	urls := clusterctl.URLs()
	if len(urls) != clusterctl.Nodes {
		livetest.Missing(t, "AMQP_CLUSTER_URLS does not name three nodes, so the cluster tests cannot run. Start the "+
			"three-node RabbitMQ 4 cluster with `bash test/broker/rabbitmq4.sh cluster-start` and set "+
			"AMQP_CLUSTER_URLS=$(bash test/broker/rabbitmq4.sh cluster-urls) (as root), or run `make test` as root")
	}
	if os.Getuid() != 0 {
		livetest.Missing(t, "the cluster tests kill and restart nodes with test/broker/rabbitmq4.sh, which needs root")
	}
	return urls
}

// script runs test/broker/rabbitmq4.sh with args (bounded).
func script(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, clusterctl.Script(ctx, brokerScript, args...))
}

// brokerScript is the test broker's script, from this package's directory.
const brokerScript = "../broker/rabbitmq4.sh"

// kill crashes node n (1..3) and makes sure it runs again when the test ends,
// so that every test starts with the whole cluster.
func kill(t *testing.T, n int) {
	t.Helper()
	script(t, "cluster-kill", fmt.Sprint(n))
	t.Cleanup(func() { script(t, "cluster-restart", fmt.Sprint(n)) })
}

func restart(t *testing.T, n int) time.Duration {
	t.Helper()
	t0 := time.Now()
	script(t, "cluster-restart", fmt.Sprint(n))
	return time.Since(t0)
}

// clusterApp is an App dialled at the first of urls with the others as
// failover endpoints.
func clusterApp(t *testing.T, urls []string) (*amqpactor.App, *harness.Changes) {
	log, _ := harness.NewLog(t)
	ch := harness.NewChanges()
	app := amqpactor.New(
		clusterctl.Dial(urls),
		amqpactor.WithLogger(log), amqpactor.WithBackoff(backoffInitial, backoffMax),
		amqpactor.WithCloseTimeout(3*time.Second), amqpactor.WithStateChanges(ch.Add))
	return app, ch
}

// redacted is how the tree and the state changes spell a node's URL.
func redacted(u string) string { return strings.Replace(u, "guest:guest@", "guest:xxxxx@", 1) }

// management runs f with the management client of a connection to the first
// node of urls that answers.
func management(t *testing.T, urls []string, f func(ctx context.Context, m *amqpwire.Management)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := clusterctl.Management(ctx, urls, f); err != nil {
		t.Logf("management: no node answers: %v", err)
	}
}

// clusterQueue names a fresh queue, deleted when the test ends.
func clusterQueue(t *testing.T, urls []string, prefix string) amqpactor.Address {
	name := harness.Unique(prefix)
	t.Cleanup(func() {
		management(t, urls, func(ctx context.Context, m *amqpwire.Management) { _ = brokeradmin.DeleteQueue(ctx, m, name) })
	})
	return amqpactor.Queue(name)
}

// replicas returns the nodes that hold a quorum queue, as the broker says.
func replicas(t *testing.T, urls []string, name string) []string {
	var out []string
	management(t, urls, func(ctx context.Context, m *amqpwire.Management) {
		resp, err := m.Request(ctx, "GET", amqpwire.QueuePath(name), nil)
		require.NoError(t, err)
		body, _ := resp.Body.(map[string]any)
		switch rs := body["replicas"].(type) {
		case []string:
			out = append(out, rs...)
		case []any:
			for _, r := range rs {
				out = append(out, fmt.Sprint(r))
			}
		}
	})
	sort.Strings(out)
	return out
}

// attachedElsewhere reports the App's connection attached, after at least
// restarts reconnects, to a node other than the one at dead.
func attachedElsewhere(app *amqpactor.App, restarts int, dead string) bool {
	n := harness.TreeOr(app)
	return n != nil && n.State == "attached" && n.Restarts >= restarts && n.Address != redacted(dead)
}

// step is one node loss during a scenario: after `at` confirmed publishes,
// before() runs (a restart), then node kill is killed.
type step struct {
	at     int64
	before func()
	kill   int
}

// lossScenario publishes n messages to a fresh quorum queue replicated on
// the three nodes, consuming them on the same App, while the steps kill
// nodes; it wants no publish error, nothing lost, and logs the figures.
func lossScenario(t *testing.T, urls []string, n int, steps []step) {
	q := clusterQueue(t, urls, "cluster.quorum")
	app, ch := clusterApp(t, urls)
	got := harness.NewTally()
	_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		id, _ := m.MessageID.(string)
		got.Add(id)
		return nil
	}, amqpactor.WithCredit(256))
	require.NoError(t, err)
	harness.StartApp(t, app)
	reps := replicas(t, urls, q.Name())
	require.Len(t, reps, 3, "the quorum queue is replicated on the three nodes: %v", reps)

	ctx := harness.Bound(t, 4*time.Minute)
	all := harness.IDs(harness.Unique("m"), n)
	started := time.Now()
	pub := harness.PublishAll(ctx, app, q, all, 16, false)
	var resumes, reconnects []time.Duration
	for k, s := range steps {
		require.Eventually(t, func() bool { return pub.Confirmed.Load()+pub.Errors.Load() >= s.at }, 2*time.Minute, 5*time.Millisecond,
			"%d publishes before loss %d (confirmed %d, errors %d, last %v)", s.at, k+1, pub.Confirmed.Load(), pub.Errors.Load(), pub.Err())
		if s.before != nil {
			s.before()
		}
		n0 := harness.TreeOr(app)
		require.NotNil(t, n0)
		require.Equal(t, redacted(urls[s.kill-1]), n0.Address, "the App is on the node about to be killed")
		t0 := time.Now() // the figures include the kill command's own run (bash, chroot, SIGKILL)
		kill(t, s.kill)
		require.Eventually(t, func() bool { return attachedElsewhere(app, n0.Restarts+1, urls[s.kill-1]) }, failoverBudget, 5*time.Millisecond,
			"attached to another node within %s:\n%s", failoverBudget, harness.TreeText(harness.TreeOr(app)))
		reconnects = append(reconnects, time.Since(t0))
		before := got.Total()
		require.Eventually(t, func() bool { return got.Total() > before || got.Distinct() == n }, failoverBudget, 5*time.Millisecond,
			"consumption resumes after loss %d:\n%s", k+1, harness.TreeText(harness.TreeOr(app)))
		resumes = append(resumes, time.Since(t0))
	}
	pub.Wait()
	require.Zero(t, pub.Errors.Load(), "no publish failed (last error %v)", pub.Err())
	require.EqualValues(t, n, pub.Confirmed.Load())
	require.Eventually(t, func() bool { return got.Distinct() == n }, 90*time.Second, 10*time.Millisecond,
		"every message delivered: %d of %d; missing %d\n%s", got.Distinct(), n, len(got.Missing(all)), harness.TreeText(harness.TreeOr(app)))
	lost := len(got.Missing(all))
	require.Zero(t, lost)

	root := harness.TreeOr(app)
	require.NotNil(t, root)
	attached := ch.AttachedTo("connection")
	require.GreaterOrEqual(t, len(attached), len(steps)+1, "state changes: %v", attached)
	require.Equal(t, redacted(urls[0]), attached[0], "first attached to the Dial URL")
	for _, a := range attached {
		require.NotContains(t, a, "guest:guest", "no credentials in StateChange.Address")
	}
	require.Equal(t, root.Address, attached[len(attached)-1], "the tree names the node the state changes say")
	resent := harness.Sum(root, "sender", "resent")
	t.Logf("FIGURES %s: published=%d publish_errors=%d lost=%d duplicates=%d resent=%d losses=%d reconnect=%v resume=%v elapsed=%s attached=%v",
		t.Name(), n, pub.Errors.Load(), lost, got.Duplicates(), resent, len(steps), rounded(reconnects), rounded(resumes),
		time.Since(started).Round(time.Millisecond), attached)
}

func rounded(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond).String()
	}
	return out
}

// TestClusterNodeLoss: 3,000 messages to a quorum queue replicated on the
// three nodes while the node the App is connected to is killed after 1,000:
// no publish fails, nothing is lost, consumption resumes on another node.
func TestClusterNodeLoss(t *testing.T) {
	urls := nodes(t)
	lossScenario(t, urls, 3000, []step{{at: 1000, kill: 1}})
}

// TestClusterTwoNodeLosses: the same, with the killed node restarted after
// 1,500 messages and the node the App failed over to killed after 2,000.
func TestClusterTwoNodeLosses(t *testing.T) {
	urls := nodes(t)
	lossScenario(t, urls, 3000, []step{
		{at: 1000, kill: 1},
		{at: 2000, kill: 2, before: func() { t.Logf("node 1 restarted in %s", restart(t, 1).Round(time.Millisecond)) }},
	})
}

// TestClusterTopicAndRequest: a topic subscription and a request/reply round
// trip work before and after the node the Apps are connected to is killed.
func TestClusterTopicAndRequest(t *testing.T) {
	urls := nodes(t)
	rpc := clusterQueue(t, urls, "cluster.rpc")
	topic := amqpactor.Topic(harness.Unique("cluster.topic"))

	responder, _ := clusterApp(t, urls)
	_, err := responder.Subscribe(rpc, amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: append([]byte("re:"), req.Body...)}, nil
	}))
	require.NoError(t, err)
	harness.StartApp(t, responder)

	app, _ := clusterApp(t, urls)
	var events atomic.Int64
	var mu sync.Mutex
	seen := map[string]bool{}
	_, err = app.Subscribe(topic, func(ctx context.Context, m *amqpactor.Message) error {
		mu.Lock()
		seen[string(m.Body)] = true
		mu.Unlock()
		events.Add(1)
		return nil
	})
	require.NoError(t, err)
	harness.StartApp(t, app)

	ctx := harness.Bound(t, 3*time.Minute)
	// roundTrip publishes an event to the topic until the subscription has
	// it and makes one request; a message published while the subscription
	// queue is being declared again may miss it, which is why the event is
	// published again (a topic keeps nothing for a subscription not there).
	roundTrip := func(phase string) time.Duration {
		t0 := time.Now()
		body := harness.Unique(phase)
		var last time.Time
		require.Eventually(t, func() bool {
			mu.Lock()
			ok := seen[body]
			mu.Unlock()
			if ok || time.Since(last) < 500*time.Millisecond {
				return ok
			}
			last = time.Now()
			pctx, cancel := context.WithTimeout(ctx, publishTimeout)
			defer cancel()
			if err := app.Publish(pctx, topic, &amqpactor.Message{Body: []byte(body)}); err != nil {
				t.Logf("%s: publish to the topic: %v", phase, err)
			}
			return false
		}, failoverBudget, 10*time.Millisecond, "%s: the topic subscription gets an event", phase)
		rctx, cancel := context.WithTimeout(ctx, publishTimeout)
		defer cancel()
		rep, err := app.Request(rctx, rpc, &amqpactor.Message{Body: []byte(phase)})
		require.NoError(t, err, "%s: request", phase)
		require.Equal(t, "re:"+phase, string(rep.Body))
		return time.Since(t0)
	}
	roundTrip("before")
	t0 := time.Now()
	kill(t, 1)
	require.Eventually(t, func() bool { return attachedElsewhere(app, 1, urls[0]) && attachedElsewhere(responder, 1, urls[0]) },
		failoverBudget, 5*time.Millisecond, "both Apps attached to another node:\n%s\n%s", harness.TreeText(harness.TreeOr(app)), harness.TreeText(harness.TreeOr(responder)))
	reconnect := time.Since(t0)
	after := roundTrip("after")
	t.Logf("FIGURES %s: reconnect=%s topic_event_and_request_after_failover=%s events=%d",
		t.Name(), reconnect.Round(time.Millisecond), after.Round(time.Millisecond), events.Load())
}
