package artemis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// dlq subscribes app to the broker's dead-letter queue (Artemis's default
// dead-letter address DLQ, with its queue DLQ) and records the messages
// whose message-id starts with prefix. The queue is shared by everything
// on the broker: another test's dead letter is refused with
// undeliverable-here, which leaves it there for others and never offers it
// to this link again. One partition handles in the queue's order, so a
// marker seen means what was queued before it has been seen too.
func dlq(t *testing.T, app *amqpactor.App, prefix string) *seen {
	t.Helper()
	got := &seen{}
	_, err := app.Subscribe(amqpactor.Queue("DLQ"), func(ctx context.Context, m *amqpactor.Message) error {
		if !strings.HasPrefix(fmt.Sprint(m.MessageID), prefix) {
			return amqpactor.Undeliverable(errors.New("another test's dead letter"))
		}
		got.add(m)
		return nil
	}, amqpactor.WithPartitions(1))
	require.NoError(t, err)
	return got
}

// TestRejectReachesDeadLetterAddress: a handler returning Reject(err)
// settles rejected, and Artemis moves the message to its dead-letter
// address at once, with its message-id, naming where it came from.
func TestRejectReachesDeadLetterAddress(t *testing.T) {
	q := amqpactor.Queue(unique("reject"))
	removeAddress(t, q.Name())
	prefix := q.Name() + "/"
	var calls seen
	app := newApp(t, "")
	_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		calls.add(m)
		return amqpactor.Reject(errors.New("bad order"))
	})
	require.NoError(t, err)
	dead := dlq(t, app, prefix)
	start(t, app)
	publish(t, app, q, prefix+"x")
	eventually(t, func() bool { return dead.n() >= 1 }, "the rejected message in DLQ")
	d := dead.of(prefix + "x")
	require.Len(t, d, 1)
	require.Equal(t, "body of "+prefix+"x", string(d[0].Body))
	// Artemis names the origin in its annotations; the rejected outcome's
	// error (condition, description) is not kept.
	require.Equal(t, q.Name(), d[0].Annotations["x-opt-ORIG-ADDRESS"])
	require.Equal(t, q.Name(), d[0].Annotations["x-opt-ORIG-QUEUE"])
	t.Logf("dead letter: annotations %v headers %v", d[0].Annotations, d[0].Headers)
	require.Len(t, calls.of(prefix+"x"), 1, "a rejected message is not redelivered")
}

// TestRetryPolicyDeadLetters: where a message that always fails ends up,
// by RetryPolicy, on Artemis (max-delivery-attempts 10, its default):
//
//   - MaxDeliveries 3: three attempts, the third failure sent as
//     rejected, and the broker moves it to its dead-letter address;
//   - MaxDeliveries 3, DeadLetter D: three attempts, the runtime's copy
//     in D with the failure annotations, the original accepted: nothing
//     in the broker's DLQ;
//   - MaxDeliveries 12: the broker's limit comes first, after 10
//     attempts it moves the message to DLQ itself (the runtime never got
//     to the last attempt).
func TestRetryPolicyDeadLetters(t *testing.T) {
	src := unique("retry")
	prefix := src + "/"
	app := newApp(t, "")
	dead := dlq(t, app, prefix)
	type mode struct {
		name     string
		policy   amqpactor.RetryPolicy
		attempts int
		q        amqpactor.Address
		calls    *seen
		sub      *amqpactor.Subscription
	}
	ownDL := amqpactor.Queue(src + ".dead")
	removeAddress(t, ownDL.Name())
	modes := []*mode{
		{name: "max3", policy: amqpactor.RetryPolicy{MaxDeliveries: 3}, attempts: 3},
		{name: "max3-deadletter", policy: amqpactor.RetryPolicy{MaxDeliveries: 3, DeadLetter: ownDL}, attempts: 3},
		{name: "max12", policy: amqpactor.RetryPolicy{MaxDeliveries: 12}, attempts: 10},
		// Rejects a marker straight into DLQ; see below.
		{name: "marker"},
	}
	for _, m := range modes {
		m.q = amqpactor.Queue(src + "." + m.name)
		removeAddress(t, m.q.Name())
		m.calls = &seen{}
		var opts []amqpactor.SubscribeOption
		if m.policy != (amqpactor.RetryPolicy{}) {
			opts = append(opts, amqpactor.WithRetry(m.policy))
		}
		var err error
		m.sub, err = app.Subscribe(m.q, func(ctx context.Context, msg *amqpactor.Message) error {
			m.calls.add(msg)
			if m.name == "marker" {
				return amqpactor.Reject(errors.New("marker"))
			}
			return errors.New("always fails")
		}, opts...)
		require.NoError(t, err)
	}
	var copies seen
	_, err := app.Subscribe(ownDL, copies.handler)
	require.NoError(t, err)
	start(t, app)

	for _, m := range modes[:3] {
		publish(t, app, m.q, prefix+m.name)
	}
	for _, m := range modes[:3] {
		eventually(t, func() bool {
			c := counters(app, m.sub)
			return c["rejected"]+c["accepted"] == 1 || c["modified"] == uint64(m.attempts)
		}, "%s: the last attempt settled", m.name)
	}
	eventually(t, func() bool { return copies.n() >= 1 }, "the runtime's copy in %s", ownDL)
	// Everything the broker moves to DLQ for these has been moved once the
	// marker, rejected after every last attempt settled, is there.
	publish(t, app, modes[3].q, prefix+"marker")
	eventually(t, func() bool { return len(dead.of(prefix+"marker")) == 1 }, "the marker in DLQ")
	eventually(t, func() bool { return len(dead.of(prefix+"max12")) == 1 }, "max12 in DLQ")

	for _, m := range modes[:3] {
		calls := m.calls.of(prefix + m.name)
		require.Len(t, calls, m.attempts, "%s: attempts", m.name)
		for i, c := range calls {
			require.EqualValues(t, i, c.DeliveryCount, "%s: delivery-count of attempt %d", m.name, i+1)
		}
		t.Logf("%s: %d attempts, receiver counters %v", m.name, len(calls), counters(app, m.sub))
	}
	require.Len(t, dead.of(prefix+"max3"), 1, "max3: the broker dead-letters what the runtime rejects")
	require.Empty(t, dead.of(prefix+"max3-deadletter"), "max3-deadletter: the runtime's copy replaces the broker's dead letter")
	require.Len(t, copies.of(prefix+"max3-deadletter"), 1)
	cp := copies.of(prefix + "max3-deadletter")[0]
	require.Contains(t, cp.Annotations[amqpactor.FailureAnnotation], "always fails")
	require.EqualValues(t, 3, cp.Annotations[amqpactor.DeliveriesAnnotation])
	require.Equal(t, modes[1].q.String(), cp.Annotations[amqpactor.DeadLetterFromAnnotation])
	require.Len(t, dead.of(prefix+"max12"), 1, "max12: the broker's max-delivery-attempts (10) dead-letters it first")
	max12 := dead.of(prefix + "max12")[0]
	require.Equal(t, modes[2].q.Name(), max12.Annotations["x-opt-ORIG-ADDRESS"])
	require.EqualValues(t, map[string]uint64{"rejected": 1, "modified": 2}, pick(counters(app, modes[0].sub), "rejected", "modified", "accepted"), "max3: outcomes")
	require.EqualValues(t, map[string]uint64{"accepted": 1, "modified": 2}, pick(counters(app, modes[1].sub), "rejected", "modified", "accepted"), "max3-deadletter: outcomes")
	require.EqualValues(t, map[string]uint64{"modified": 10}, pick(counters(app, modes[2].sub), "rejected", "modified", "accepted"), "max12: outcomes")
}

// pick is the non-zero counters of c among keys.
func pick(c map[string]uint64, keys ...string) map[string]uint64 {
	out := map[string]uint64{}
	for _, k := range keys {
		if c[k] != 0 {
			out[k] = c[k]
		}
	}
	return out
}
