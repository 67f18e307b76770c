package live

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	amqpactor "github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/harness"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// TestConsumerTimeoutRelease: a handler holds a delivery past its quorum
// queue's consumer timeout (x-consumer-timeout, set short). RabbitMQ 4.3
// releases the delivery to the link instead of detaching it, and assigns
// the link nothing more until the client settles it too: the runtime
// answers at once, counts the event on the receiver's node
// (broker_settled) and logs it, and drops the handler's late outcome with
// a log line instead of settling the delivery a second time. The link
// stays attached and nothing is lost: every message is accepted once, the
// released ones after their redelivery. RabbitMQ 4.0 applies no consumer
// timeout to an AMQP 1.0 link.
func TestConsumerTimeoutRelease(t *testing.T) {
	u := brokerURL(t)
	v := livetest.RabbitMQ(t, u)
	q := amqpactor.Queue(unique("live.ctimeout"))
	logs := &harness.LogBuffer{}
	app := newApp(t, u, logs)
	const n = 20
	var mu sync.Mutex
	seen := map[string]int{}
	slowDone := make(chan struct{})
	_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		body := string(m.Body)
		mu.Lock()
		seen[body]++
		first := seen[body] == 1
		mu.Unlock()
		if body == "slow" && first {
			// Outlive the consumer timeout, whatever the broker does.
			time.Sleep(6 * time.Second)
			close(slowDone)
		}
		return nil
	}, amqpactor.WithPartitions(4), amqpactor.WithQueueArguments(map[string]any{"x-consumer-timeout": int64(1000)}))
	require.NoError(t, err)
	start(t, app)
	ctx := bound(t)
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{Body: []byte("slow")}))
	for i := range n {
		require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{Body: []byte(fmt.Sprintf("m%d", i))}))
	}
	select {
	case <-slowDone:
	case <-ctx.Done():
		t.Fatal("the slow handler never ended")
	}
	receiver := func() *amqpactor.Node {
		tree, err := app.Tree(bound(t))
		require.NoError(t, err)
		var found *amqpactor.Node
		var walk func(nd *amqpactor.Node)
		walk = func(nd *amqpactor.Node) {
			if nd.Kind == "receiver" && found == nil {
				found = nd
			}
			for _, c := range nd.Children {
				walk(c)
			}
		}
		walk(tree)
		require.NotNil(t, found, "a receiver node")
		return found
	}
	// Every message accepted once: the queue empties, and no handler holds
	// a delivery.
	var rn *amqpactor.Node
	require.Eventually(t, func() bool {
		rn = receiver()
		return rn.Counters["accepted"] == n+1 && rn.Counters["unsettled"] == 0
	}, 20*time.Second, 50*time.Millisecond, "every message accepted once")
	mgmt(t, u, func(ctx context.Context, m *amqpwire.Management) {
		require.Eventually(t, func() bool {
			info, err := m.QueueInfo(ctx, q.Name())
			require.NoError(t, err)
			return info.Messages == 0
		}, 10*time.Second, 50*time.Millisecond, "the queue empties")
	})
	mu.Lock()
	for i := range n {
		require.GreaterOrEqual(t, seen[fmt.Sprintf("m%d", i)], 1, "m%d handled", i)
	}
	slowSeen := seen["slow"]
	mu.Unlock()
	c := rn.Counters
	t.Logf("RabbitMQ %v: receiver %s, counters %v", v, rn.State, c)
	require.Equal(t, "attached", rn.State, "the link stays attached")
	require.Zero(t, rn.Restarts, "the link was never detached")
	// One disposition per delivery: the handlers' own, and the answer to
	// each delivery the broker settled; a late outcome sends none.
	require.Equal(t, c["delivered"], c["accepted"]+c["broker_settled"], "counters %v", c)
	require.Equal(t, c["broker_settled"], c["late"], "each outcome for a delivery the broker settled is dropped: %v", c)
	if !v.AtLeast(4, 3) {
		// 4.0 applies no consumer timeout to an AMQP 1.0 link.
		require.Zero(t, c["broker_settled"], "counters %v", c)
		require.Equal(t, 1, slowSeen)
		return
	}
	require.GreaterOrEqual(t, c["broker_settled"], uint64(1), "RabbitMQ %v releases the held delivery: %v", v, c)
	require.Equal(t, 2, slowSeen, "the released delivery comes again")
	require.Contains(t, logs.String(), "the broker settled a delivery a handler still holds")
	require.Contains(t, logs.String(), "handler's outcome dropped")
}

// TestBrokerDelay: RetryPolicy.BrokerDelay has RabbitMQ 4.3 hold a failure
// back before it redelivers it (delayed retry on the quorum queue): each
// wait is BrokerDelay times the delivery-count, capped by MaxBrokerDelay,
// and the messages behind the failing one are handled meanwhile (the
// partition does not wait, unlike Backoff). Before 4.3 the receiver
// refuses to attach, and Start fails saying why.
func TestBrokerDelay(t *testing.T) {
	u := brokerURL(t)
	v := livetest.RabbitMQ(t, u)
	q := amqpactor.Queue(unique("live.brokerdelay"))
	app := newApp(t, u, nil)
	var mu sync.Mutex
	var tries []time.Time
	var others []time.Time
	_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if string(m.Body) != "fails" {
			others = append(others, time.Now())
			return nil
		}
		tries = append(tries, time.Now())
		if len(tries) < 4 {
			return errors.New("not yet")
		}
		return nil
	}, amqpactor.WithPartitions(1), amqpactor.WithRetry(amqpactor.RetryPolicy{
		MaxDeliveries: 10, BrokerDelay: 400 * time.Millisecond, MaxBrokerDelay: time.Second}))
	require.NoError(t, err)
	if !v.AtLeast(4, 3) {
		err := app.Start(bound(t))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			_ = app.Stop(ctx)
		})
		require.ErrorIs(t, err, amqpactor.ErrNotSupported, "RabbitMQ %v", v)
		require.ErrorContains(t, err, "needs RabbitMQ 4.3")
		return
	}
	start(t, app)
	ctx := bound(t)
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{Body: []byte("fails")}))
	for i := range 5 {
		require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{Body: []byte(fmt.Sprint("other", i))}))
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(tries) == 4 && len(others) == 5
	}, 20*time.Second, 20*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	// The broker's waits: 400 ms times the delivery-count (1, 2), then the
	// cap of 1 s. A little less is the timestamps' slack, not an early retry.
	for i, want := range []time.Duration{400 * time.Millisecond, 800 * time.Millisecond, time.Second} {
		got := tries[i+1].Sub(tries[i])
		require.GreaterOrEqual(t, got, want-50*time.Millisecond, "wait %d: %v", i+1, got)
		require.Less(t, got, want+time.Second, "wait %d: %v", i+1, got)
	}
	// One partition, yet the others did not wait for the failing message.
	require.True(t, others[4].Before(tries[1]), "the others were handled while the failure waited on the broker")
	mgmt(t, u, func(ctx context.Context, m *amqpwire.Management) {
		info, err := m.QueueInfo(ctx, q.Name())
		require.NoError(t, err)
		require.Equal(t, "failed", fmt.Sprint(info.Arguments["x-delayed-retry-type"]), "arguments %v", info.Arguments)
	})
}
