package faults

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/harness"
)

// TestLiveCutStateChanges: an App on a live broker through the proxy, with
// a subscription and a publish done; the proxy cuts its connection. The
// connection, the publisher, the subscription and their links each report
// attached → detached/restarting → attached, in order, on the actor
// system's EventStream and through WithStateChanges alike.
func TestLiveCutStateChanges(t *testing.T) { eachBroker(t, cutStateChanges) }

func cutStateChanges(t *testing.T, b liveBroker) {
	p, pu := viaProxy(t, b.url)
	q := b.queue(t, "faults.events")
	sys := harness.NewSystem(t)
	fromStream, unsubscribe := harness.WatchStream(sys)
	t.Cleanup(unsubscribe)
	fromOption := harness.NewChanges()
	log, _ := harness.NewLog(t)
	app := amqpactor.New(amqpactor.Dial(pu, amqpactor.WithDialect(b.dialect)),
		amqpactor.WithActorSystem(sys), amqpactor.WithLogger(log),
		amqpactor.WithBackoff(backoffInitial, backoffMax), amqpactor.WithCloseTimeout(3*time.Second),
		amqpactor.WithStateChanges(fromOption.Add))
	got := harness.NewTally()
	_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error { got.Add(m.MessageID.(string)); return nil },
		amqpactor.WithSubscriptionName("events-sub"))
	require.NoError(t, err)
	harness.StartApp(t, app)

	subPath := "connection/subscription:events-sub"
	nodes := []string{"connection", "connection/publisher", subPath, subPath + "/receiver", "connection/publisher/sender:" + q.Name()}
	ctx := harness.Bound(t, 2*time.Minute)
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{MessageID: "before", Durable: true}))
	require.Eventually(t, func() bool { return got.Has("before") }, 20*time.Second, 5*time.Millisecond)
	for _, rec := range []*harness.Changes{fromStream, fromOption} {
		require.Eventually(t, func() bool { return rec.AllAttached(nodes) }, 20*time.Second, 5*time.Millisecond, "every node attached")
	}
	marks := [2]map[string]int{fromStream.Marks(), fromOption.Marks()}

	require.NotZero(t, p.Cut(), "connections cut")
	// A sender with nothing to send re-attaches on the next publish.
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{MessageID: "after", Durable: true}))
	require.Eventually(t, func() bool { return got.Has("after") }, 30*time.Second, 5*time.Millisecond)
	for i, rec := range []*harness.Changes{fromStream, fromOption} {
		for _, n := range nodes {
			require.Eventually(t, func() bool { return rec.Recovered(n, marks[i][n]) }, 30*time.Second, 5*time.Millisecond,
				"%s: %s", n, harness.Transitions(rec.Of(n)))
		}
	}
	for _, n := range nodes {
		harness.InOrder(t, "EventStream", n, fromStream.Of(n))
		harness.InOrder(t, "WithStateChanges", n, fromOption.Of(n))
		require.Equal(t, harness.Transitions(fromStream.Of(n)), harness.Transitions(fromOption.Of(n)), n)
		t.Logf("%s: %s", n, harness.Transitions(fromOption.Of(n)))
	}
	// The connection went restarting, with the reason.
	cs := fromOption.Of("connection")[marks[1]["connection"]:]
	require.Equal(t, "restarting", cs[0].To, harness.Transitions(cs))
	require.Error(t, cs[0].Err)
}
