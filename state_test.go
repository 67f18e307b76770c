package amqpactor_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/test/harness"
)

const (
	evSub      = "connection/subscription:orders-sub"
	evReceiver = evSub + "/receiver"
	evSender   = "connection/publisher/sender:orders"
)

// evNodes are the nodes a fault on the orders queue affects.
var evNodes = []string{"connection", "connection/publisher", evSub, evReceiver, evSender}

// eventApp is an App on the in-process broker whose state changes are
// recorded twice: from its actor system's EventStream and from
// WithStateChanges. It publishes to and consumes from "orders".
// Each setup runs on the App before it starts.
func eventApp(t *testing.T, sys *actor.ActorSystem, setup ...func(*amqpactor.App)) (*amqpactor.App, *inproc.Broker, *harness.Changes, *harness.Changes, func()) {
	t.Helper()
	fromStream, unsubscribe := harness.WatchStream(sys)
	fromOption := harness.NewChanges()
	b := inproc.New()
	app := amqpactor.New(b, amqpactor.WithActorSystem(sys), amqpactor.WithName("events"),
		amqpactor.WithBackoff(5*time.Millisecond, 50*time.Millisecond),
		amqpactor.WithStateChanges(fromOption.Add))
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(ctx context.Context, m *amqpactor.Message) error { return nil },
		amqpactor.WithSubscriptionName("orders-sub"))
	require.NoError(t, err)
	for _, f := range setup {
		f(app)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("x")}))
	for _, rec := range []*harness.Changes{fromStream, fromOption} {
		require.Eventually(t, func() bool { return rec.AllAttached(evNodes) }, 10*time.Second, 5*time.Millisecond,
			"every node attached: %v", rec.Paths())
	}
	return app, b, fromStream, fromOption, unsubscribe
}

func stopApp(t *testing.T, app *amqpactor.App) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Stop(ctx))
}

func TestStateChangesOnDetachLinks(t *testing.T) {
	app, b, fromStream, fromOption, unsubscribe := eventApp(t, harness.NewSystem(t))
	defer unsubscribe()
	defer stopApp(t, app)
	marks := [2]map[string]int{fromStream.Marks(), fromOption.Marks()}

	require.Equal(t, 2, b.DetachLinks(amqpactor.Queue("orders"), "amqp:link:detach-forced", "test"))
	// A sender with nothing to send re-attaches on the next publish.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("y")}))

	for i, rec := range []*harness.Changes{fromStream, fromOption} {
		for _, p := range []string{evReceiver, evSender} {
			require.Eventually(t, func() bool { return rec.Recovered(p, marks[i][p]) }, 10*time.Second, 5*time.Millisecond,
				"%s: %s", p, harness.Transitions(rec.Of(p)))
		}
	}
	// Only the links went: the connection and the sessions did not change.
	for i, rec := range []*harness.Changes{fromStream, fromOption} {
		for _, p := range []string{"connection", "connection/publisher", evSub} {
			require.Len(t, rec.Of(p), marks[i][p], "%s: %s", p, harness.Transitions(rec.Of(p)))
		}
	}
	for _, p := range evNodes {
		harness.Chained(t, "EventStream", p, fromStream.Of(p))
		harness.Chained(t, "WithStateChanges", p, fromOption.Of(p))
		require.Equal(t, harness.Transitions(fromStream.Of(p)), harness.Transitions(fromOption.Of(p)), p)
	}
	// A receiver's link error says why it went.
	var why error
	for _, sc := range fromOption.Of(evReceiver)[marks[1][evReceiver]:] {
		if sc.To == "restarting" || sc.To == "detached" {
			why = sc.Err
			break
		}
	}
	require.ErrorContains(t, why, "detach-forced")
}

func TestStateChangesOnDropConnections(t *testing.T) {
	app, b, fromStream, fromOption, unsubscribe := eventApp(t, harness.NewSystem(t))
	defer unsubscribe()
	defer stopApp(t, app)
	marks := [2]map[string]int{fromStream.Marks(), fromOption.Marks()}

	require.Equal(t, 1, b.DropConnections(nil))
	for i, rec := range []*harness.Changes{fromStream, fromOption} {
		for _, p := range evNodes {
			require.Eventually(t, func() bool { return rec.Recovered(p, marks[i][p]) }, 10*time.Second, 5*time.Millisecond,
				"%s: %s", p, harness.Transitions(rec.Of(p)))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("y")}))
	for _, p := range evNodes {
		harness.Chained(t, "EventStream", p, fromStream.Of(p))
		harness.Chained(t, "WithStateChanges", p, fromOption.Of(p))
	}
	// The connection went restarting with the reason, and came back.
	cs := fromOption.Of("connection")[marks[1]["connection"]:]
	require.Equal(t, "restarting", cs[0].To, harness.Transitions(cs))
	require.ErrorContains(t, cs[0].Err, "connection")
}

func TestStateChangesOnEndSessions(t *testing.T) {
	const evRequests = "connection/requests"
	rpc := amqpactor.Queue("rpc")
	app, b, fromStream, fromOption, unsubscribe := eventApp(t, harness.NewSystem(t), func(app *amqpactor.App) {
		_, err := app.Subscribe(rpc, amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
			return &amqpactor.Message{Body: req.Body}, nil
		}), amqpactor.WithSubscriptionName("rpc-sub"))
		require.NoError(t, err)
	})
	defer unsubscribe()
	defer stopApp(t, app)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The requests actor attaches its reply link on the first request.
	_, err := app.Request(ctx, rpc, &amqpactor.Message{Body: []byte("before")})
	require.NoError(t, err)
	nodes := append(slices.Clone(evNodes), evRequests, "connection/subscription:rpc-sub", "connection/subscription:rpc-sub/receiver")
	for _, rec := range []*harness.Changes{fromStream, fromOption} {
		require.Eventually(t, func() bool { return rec.Attached(evRequests) }, 10*time.Second, 5*time.Millisecond,
			"%s: %s", evRequests, harness.Transitions(rec.Of(evRequests)))
	}
	marks := [2]map[string]int{fromStream.Marks(), fromOption.Marks()}

	// Every session ends; the connection stays.
	require.GreaterOrEqual(t, b.EndSessions(amqpactor.Address{}, "amqp:internal-error", "test end sessions"), 3)
	// A sender with nothing to send, and the requests actor, re-attach on
	// the next publish and request. A request in flight when its reply
	// link ended fails by design: the next one attaches anew.
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("y")}))
	require.Eventually(t, func() bool {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		_, err := app.Request(rctx, rpc, &amqpactor.Message{Body: []byte("after")})
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "a request after the sessions ended")

	for i, rec := range []*harness.Changes{fromStream, fromOption} {
		for _, p := range nodes[1:] {
			require.Eventually(t, func() bool { return rec.Recovered(p, marks[i][p]) }, 10*time.Second, 5*time.Millisecond,
				"%s: %s", p, harness.Transitions(rec.Of(p)))
		}
		// The connection did not change.
		require.Len(t, rec.Of("connection"), marks[i]["connection"], harness.Transitions(rec.Of("connection")))
	}
	for _, p := range nodes {
		harness.Chained(t, "EventStream", p, fromStream.Of(p))
		harness.Chained(t, "WithStateChanges", p, fromOption.Of(p))
		require.Equal(t, harness.Transitions(fromStream.Of(p)), harness.Transitions(fromOption.Of(p)), p)
	}
}

func TestStateChangesStopEveryNode(t *testing.T) {
	sys := harness.NewSystem(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), ignoreThrottle)
	app, _, fromStream, fromOption, unsubscribe := eventApp(t, sys)
	defer unsubscribe()
	// Every node of the tree has had a change by now.
	tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tree, err := app.Tree(tctx)
	require.NoError(t, err)
	var inTree []string
	var walk func(prefix string, n *amqpactor.Node)
	walk = func(prefix string, n *amqpactor.Node) {
		p := prefix + n.Name
		if n.State != "" && n.Kind != "dispatcher" && n.Kind != "partition" && n.Kind != "txn" {
			inTree = append(inTree, p)
		}
		for _, c := range n.Children {
			walk(p+"/", c)
		}
	}
	walk("", tree)
	for _, p := range evNodes {
		require.Contains(t, inTree, p)
	}

	stopApp(t, app)
	// Stop returns once every change has been delivered: no waiting here.
	for _, rec := range []*harness.Changes{fromStream, fromOption} {
		for _, p := range inTree {
			cs := rec.Of(p)
			require.NotEmpty(t, cs, p)
			require.Equal(t, "stopped", cs[len(cs)-1].To, "%s: %s", p, harness.Transitions(cs))
			harness.Chained(t, "", p, cs)
		}
	}
	require.Zero(t, app.DroppedStateChanges())
}

func TestWatchStateChangesBeforeStart(t *testing.T) {
	app := amqpactor.New(inproc.New(), amqpactor.WithBackoff(5*time.Millisecond, 50*time.Millisecond))
	got := harness.NewChanges()
	stop := app.WatchStateChanges(got.Add)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	require.Eventually(t, func() bool { return got.Attached("connection") }, 10*time.Second, 5*time.Millisecond)
	stop()
	n := len(got.Of("connection"))
	stopApp(t, app)
	require.Len(t, got.Of("connection"), n, "no change after the watch stopped")
	amqpactor.New(nil).WatchStateChanges(nil)() // a nil function is a no-op
}
