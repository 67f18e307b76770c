package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// groupRun is what one run of the order scenario measured.
type groupRun struct {
	inversions map[string]int // per group: a message handled after a later one
	handled    int            // distinct messages handled successfully
	attempts   int
}

// runFailOnce publishes groups x perGroup messages, interleaved at random
// (each group in its own order), to a subscription with 8 partitions whose
// handler fails every 10th message once, and records each group's sequence
// as handled (successes only).
func runFailOnce(e *env, base string, groups, perGroup int, opts ...amqpactor.SubscribeOption) groupRun {
	q := e.queue(base)
	var (
		mu       sync.Mutex
		order    = map[string][]uint32{}
		failed   = map[string]bool{}
		done     = map[string]bool{}
		attempts atomic.Int32
	)
	published := e.gate()
	app := e.startedApp()
	e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		attempts.Add(1)
		if m.GroupSequence == 1 && !published.wait() {
			return errors.New("never released")
		}
		id := fmt.Sprint(m.MessageID)
		mu.Lock()
		defer mu.Unlock()
		if m.GroupSequence%10 == 0 && !failed[id] {
			failed[id] = true
			return errors.New("fails once")
		}
		if !done[id] {
			done[id] = true
			order[m.GroupID] = append(order[m.GroupID], m.GroupSequence)
		}
		return nil
	}, append([]amqpactor.SubscribeOption{amqpactor.WithPartitions(8)}, opts...)...)

	e.publishInterleaved(app, q, groups, perGroup, "customer-", [2]uint64{3, 4})
	published.open()
	e.eventually(func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == groups*perGroup
	}, "every message handled")
	mu.Lock()
	defer mu.Unlock()
	r := groupRun{inversions: map[string]int{}, handled: len(done), attempts: int(attempts.Load())}
	for g, seq := range order {
		for i := 1; i < len(seq); i++ {
			if seq[i] < seq[i-1] {
				r.inversions[g]++
			}
		}
	}
	return r
}

// testRetryInPlaceKeepsOrder: with RetryPolicy{Backoff} a message that
// fails once is retried in place by its partition, so 8 groups (customers)
// on 8 partitions keep their order: 0 inversions per group, nothing lost.
// Without Backoff (the broker redelivers) the same run is measured, not
// asserted: its inversions are the caveat WithRetry documents.
func testRetryInPlaceKeepsOrder(e *env) {
	const groups, perGroup = 8, 40
	r := runFailOnce(e, "retry-order", groups, perGroup,
		amqpactor.WithRetry(amqpactor.RetryPolicy{Backoff: 5 * time.Millisecond, MaxDeliveries: 5}))
	e.Logf("%s: Backoff 5ms: %d groups x %d, every 10th failing once: inversions %v, handled %d, attempts %d",
		e.f.Name, groups, perGroup, r.inversions, r.handled, r.attempts)
	require.Equal(e, groups*perGroup, r.handled, "lost messages")
	for g, n := range r.inversions {
		require.Zero(e, n, "order inversions in %s", g)
	}
	require.Equal(e, groups*perGroup+groups*perGroup/10, r.attempts, "one more attempt per failing message")

	base := runFailOnce(e, "retry-order-broker", groups, perGroup, amqpactor.WithRetry(amqpactor.RetryPolicy{MaxDeliveries: 5}))
	total := 0
	for _, n := range base.inversions {
		total += n
	}
	e.Logf("%s: without Backoff (broker redelivery): inversions %v (%d groups of %d out of order), handled %d",
		e.f.Name, base.inversions, len(base.inversions), groups, base.handled)
}

// testDeadLetter: with MaxDeliveries 3 and a DeadLetter queue, every
// message that always fails is tried 3 times and then is in the dead-letter
// queue (read back), none dropped, and the others are handled once; both
// with the broker redelivering and with retries in place. A copy the
// runtime dead-letters (in place, or where the broker does not) carries the
// failure in its annotations.
func testDeadLetter(e *env) {
	for _, mode := range []struct {
		name   string
		policy amqpactor.RetryPolicy
	}{
		{"redelivered", amqpactor.RetryPolicy{MaxDeliveries: 3}},
		{"in-place", amqpactor.RetryPolicy{MaxDeliveries: 3, Backoff: 2 * time.Millisecond}},
	} {
		if mode.policy.Backoff == 0 && !e.f.Features.DeliveryCountOnModified {
			e.Logf("%s: %s skipped: the broker does not count modified (Features.DeliveryCountOnModified)", e.f.Name, mode.name)
			continue
		}
		q, dlq := e.queue("dl-src-"+mode.name), e.queue("dl-"+mode.name)
		p := mode.policy
		p.DeadLetter = dlq
		rec := &recorder{}
		app := e.startedApp()
		sub := e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
			rec.add("h", m)
			if strings.HasPrefix(fmt.Sprint(m.MessageID), "poison") {
				return errors.New("always fails")
			}
			return nil
		}, amqpactor.WithRetry(p), amqpactor.WithPartitions(4))
		dead := &recorder{}
		e.subscribe(app, dlq, func(ctx context.Context, m *amqpactor.Message) error {
			dead.add("dl", m)
			return nil
		})
		poison, good := ids("poison", 5), ids("good", 30)
		for i, id := range good {
			e.publish(app, q, msg(id))
			if i%6 == 0 {
				e.publish(app, q, msg(poison[i/6]))
			}
		}
		e.eventually(func() bool { return dead.n() >= len(poison) && rec.distinct() == len(poison)+len(good) },
			"%s: every poison message in the dead-letter queue", mode.name)
		for _, id := range poison {
			require.Equal(e, 1, dead.count(id), "%s: %s in the dead-letter queue", mode.name, id)
			require.Len(e, rec.of(id), 3, "%s: attempts of %s", mode.name, id)
			dl := dead.of(id)[0].m
			require.Equal(e, "body of "+id, string(dl.Body), "%s: the dead letter's body", mode.name)
			if mode.policy.Backoff > 0 || !e.f.Features.BrokerDeadLetters {
				require.Contains(e, dl.Annotations[amqpactor.FailureAnnotation], "always fails", "%s: failure annotation", mode.name)
				require.EqualValues(e, 3, dl.Annotations[amqpactor.DeliveriesAnnotation], "%s: deliveries annotation", mode.name)
				require.Equal(e, q.String(), dl.Annotations[amqpactor.DeadLetterFromAnnotation], "%s: address annotation", mode.name)
			}
		}
		for _, id := range good {
			require.Equal(e, 1, rec.count(id), "%s: calls for %s", mode.name, id)
		}
		require.Equal(e, len(poison), dead.n(), "%s: only the poison messages dead-lettered", mode.name)
		c := counters(app, sub)
		e.Logf("%s: %s: %d of %d always-failing messages dead-lettered, %d others handled once, counters %v",
			e.f.Name, mode.name, dead.distinct(), len(poison), len(good), c)
		if b, ok := e.hooks(); ok {
			require.Empty(e, b.DeadLetters(q.Name()), "%s: nothing rejected into the broker's own dead letters", mode.name)
			require.Zero(e, b.QueueDepth(q.Name()), "%s: nothing left on the queue", mode.name)
		}
	}
}

// testBackoffGrows: a message that fails 4 times is retried in place after
// waits that grow: each gap between attempts is at least Backoff doubled
// per attempt (no upper bound is asserted), and each attempt shows the
// delivery-count a redelivery would.
func testBackoffGrows(e *env) {
	const backoff = 20 * time.Millisecond
	q := e.queue("backoff")
	var (
		mu     sync.Mutex
		at     []time.Time
		counts []uint32
	)
	app := e.startedApp()
	e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		counts = append(counts, m.DeliveryCount)
		if len(at) < 5 {
			return errors.New("not yet")
		}
		return nil
	}, amqpactor.WithRetry(amqpactor.RetryPolicy{Backoff: backoff, MaxBackoff: time.Second, MaxDeliveries: 6}))
	e.publish(app, q, msg("slow"))
	e.eventually(func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(at) == 5
	}, "five attempts")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(e, []uint32{0, 1, 2, 3, 4}, counts, "delivery-count of each attempt")
	gaps := make([]time.Duration, 0, 4)
	for i := 1; i < len(at); i++ {
		gap := at[i].Sub(at[i-1])
		gaps = append(gaps, gap)
		require.GreaterOrEqual(e, gap, backoff<<(i-1), "gap before attempt %d", i+1)
	}
	e.Logf("%s: Backoff %v: gaps between attempts %v", e.f.Name, backoff, gaps)
}
