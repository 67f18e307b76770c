package artemis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/harness"
)

// These add to test/conformance's outcome tests (run on Artemis by
// TestArtemis), which check each outcome alone and one late receiver for
// undeliverable-here.

// TestDeliveryCountMixedOutcomes: on one message, each modified (a handler
// error) raises delivery-count by one and each released leaves it, in any
// order: failed, released, failed, released, accepted see 0, 1, 1, 2, 2.
// (Artemis passes first-acquirer on as the sender set it, so it is not
// asserted here.)
func TestDeliveryCountMixedOutcomes(t *testing.T) {
	q := amqpactor.Queue(unique("mixed"))
	removeAddress(t, q.Name())
	var calls seen
	outcomes := []error{errors.New("fails"), amqpactor.Release(), errors.New("fails again"), amqpactor.Release(), nil}
	app := newApp(t, "")
	sub, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		calls.add(m)
		n := len(calls.of(fmt.Sprint(m.MessageID)))
		if n > len(outcomes) {
			return nil
		}
		return outcomes[n-1]
	}, amqpactor.WithPartitions(1))
	require.NoError(t, err)
	start(t, app)
	publish(t, app, q, "x")
	eventually(t, func() bool { return counters(app, sub)["accepted"] == 1 }, "accepted at last")
	got := calls.of("x")
	require.Len(t, got, len(outcomes), "attempts")
	for i, want := range []uint32{0, 1, 1, 2, 2} {
		require.Equal(t, want, got[i].DeliveryCount, "delivery-count of attempt %d", i+1)
	}
	require.Equal(t, map[string]uint64{"modified": 2, "released": 2, "accepted": 1},
		pick(counters(app, sub), "modified", "released", "accepted", "rejected"))
}

// TestUndeliverableHereBetweenTwoReceivers: two receivers attached to one
// queue at once, each refusing (undeliverable-here) the messages meant for
// the other while messages keep flowing: every message is handled by the
// receiver it is meant for, once, each is refused at most once (Artemis
// never offers a message to a link that refused it), and one refused on
// its way arrives with delivery-count 1.
func TestUndeliverableHereBetweenTwoReceivers(t *testing.T) {
	q := amqpactor.Queue(unique("undeliverable"))
	removeAddress(t, q.Name())
	type rec struct {
		mu      sync.Mutex
		handled map[string][]uint32 // delivery-count of each handling
		refused map[string]int
	}
	var recs [2]*rec
	app := newApp(t, "")
	for i := range recs {
		r := &rec{handled: map[string][]uint32{}, refused: map[string]int{}}
		recs[i] = r
		mine := fmt.Sprintf("for-%d-", i)
		_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
			id := fmt.Sprint(m.MessageID)
			r.mu.Lock()
			defer r.mu.Unlock()
			if !strings.HasPrefix(id, mine) {
				r.refused[id]++
				return amqpactor.Undeliverable(errors.New("meant for the other receiver"))
			}
			r.handled[id] = append(r.handled[id], m.DeliveryCount)
			return nil
		}, amqpactor.WithPartitions(2), amqpactor.WithCredit(8))
		require.NoError(t, err)
	}
	start(t, app)
	var ids [2][]string
	for i := range ids {
		ids[i] = harness.IDs(fmt.Sprintf("for-%d", i), 40)
	}
	// Artemis hands a queue's messages to its consumers round robin:
	// one receiver's messages in a row go half to the other one.
	for _, id := range append(ids[0], ids[1]...) {
		publish(t, app, q, id)
	}
	eventually(t, func() bool {
		for i, r := range recs {
			r.mu.Lock()
			n := len(r.handled)
			r.mu.Unlock()
			if n < len(ids[i]) {
				return false
			}
		}
		return true
	}, "every message handled by the receiver it is meant for")
	// Nothing is left to arrive: each message has been handled by its
	// receiver, and a refusal comes before that.
	var handled [2]map[string][]uint32
	var refused [2]map[string]int
	for i, r := range recs {
		r.mu.Lock()
		handled[i], refused[i] = maps.Clone(r.handled), maps.Clone(r.refused)
		r.mu.Unlock()
	}
	for i := range recs {
		for id, n := range refused[i] {
			require.Equal(t, 1, n, "receiver %d refused %s more than once", i, id)
		}
		for _, id := range ids[i] {
			counts := handled[i][id]
			require.Len(t, counts, 1, "receiver %d: %s handled once", i, id)
			want := 0
			if refused[1-i][id] > 0 {
				want = 1 // undeliverable-here is also delivery-failed
			}
			require.EqualValues(t, want, counts[0], "%s: delivery-count after %d refusals", id, want)
		}
		t.Logf("receiver %d: handled %d, refused %d", i, len(handled[i]), len(refused[i]))
	}
	require.NotEmpty(t, refused[0], "receiver 0 was offered some of receiver 1's messages")
	require.NotEmpty(t, refused[1], "receiver 1 was offered some of receiver 0's messages")
}

// TestUndeliverableHereIsPerLink: a message refused with undeliverable-here
// by the queue's only receiver stays on the queue (it is not dropped nor
// dead-lettered) and is not offered to that link again; Artemis keys the
// refusal by its consumer, so a new link of the same connection, after the
// refusing one closes, gets it (delivery-count 1).
func TestUndeliverableHereIsPerLink(t *testing.T) {
	q := amqpactor.Queue(unique("undeliverable.link"))
	removeAddress(t, q.Name())
	var first seen
	app := newApp(t, "")
	sub, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		first.add(m)
		if m.MessageID == "u" {
			return amqpactor.Undeliverable(errors.New("not here"))
		}
		return nil
	}, amqpactor.WithPartitions(1))
	require.NoError(t, err)
	start(t, app)
	publish(t, app, q, "u")
	publish(t, app, q, "after")
	eventually(t, func() bool { return len(first.of("after")) == 1 }, "the link goes on with the next message")
	require.Len(t, first.of("u"), 1, "the refused message is not offered to the link again")
	adm := newAdmin(t)
	// messageCount counts what is out for delivery too, until "after"
	// is settled.
	eventually(t, func() bool { return adm.count(t, q.Name(), "messageCount") == 1 }, "the refused message stays on the queue")

	require.NoError(t, sub.Close(bound(t)))
	var second seen
	_, err = app.Subscribe(q, second.handler)
	require.NoError(t, err)
	eventually(t, func() bool { return len(second.of("u")) == 1 }, "a new link gets it")
	require.EqualValues(t, 1, second.of("u")[0].DeliveryCount, "undeliverable-here counted as delivery-failed")
	require.Len(t, first.of("u"), 1)
}
