package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
)

var errFailed = errors.New("failed")

// failedOutcome settles a failure modified, as the App's outcomer does
// before the last attempt, and records the delivery-count it saw.
func retrySpec(partitions int, h protocol.Handler, r protocol.Retry, seen func(err error, m *messages.Message)) *protocol.SubscriptionSpec {
	return &protocol.SubscriptionSpec{
		Address: address.Queue("retry"), Partitions: partitions, Handler: h, Retry: r,
		Outcome: func(_ context.Context, err error, m *messages.Message) messages.Outcome {
			if seen != nil {
				seen(err, m)
			}
			if err != nil {
				return messages.Outcome{Kind: messages.Modified, DeliveryFailed: true}
			}
			return messages.Outcome{Kind: messages.Accepted}
		},
	}
}

// With a Backoff, a delivery that fails once is retried in place by its
// partition, which holds the rest of its groups back meanwhile: every group
// keeps its order and every delivery is accepted, none given back.
func TestRetryInPlaceKeepsGroupOrder(t *testing.T) {
	const groups, perGroup = 8, 30
	var (
		mu      sync.Mutex
		seen    = map[string][]int{}
		failed  = map[string]bool{}
		retried = map[string]uint32{}
	)
	h := func(_ context.Context, m *messages.Message) error {
		mu.Lock()
		defer mu.Unlock()
		var n int
		_, _ = fmt.Sscan(string(m.Body), &n)
		key := m.GroupID + "/" + string(m.Body)
		if n%10 == 0 && !failed[key] {
			failed[key] = true
			return errFailed
		}
		if failed[key] {
			retried[key] = m.DeliveryCount
		}
		seen[m.GroupID] = append(seen[m.GroupID], n)
		return nil
	}
	var accepted, other atomic.Int64
	spec := retrySpec(4, h, protocol.Retry{Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, MaxDeliveries: 5}, nil)
	r := newRigWith(t, spec, func(o messages.Outcome) {
		if o.Kind == messages.Accepted {
			accepted.Add(1)
		} else {
			other.Add(1)
		}
	})
	id := uint64(0)
	for i := range perGroup {
		for g := range groups {
			id++
			r.deliver(id, &messages.Message{GroupID: fmt.Sprintf("g%d", g), Body: []byte(fmt.Sprint(i))})
		}
	}
	require.Eventually(t, func() bool { return accepted.Load()+other.Load() == groups*perGroup }, 10*time.Second, time.Millisecond)
	require.Zero(t, other.Load(), "a delivery was given back instead of retried in place")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, groups)
	for g, got := range seen {
		require.Len(t, got, perGroup, g)
		for i, n := range got {
			require.Equal(t, i, n, "group %s out of order: %v", g, got)
		}
	}
	require.Len(t, retried, groups*3)
	for k, c := range retried {
		require.EqualValues(t, 1, c, "delivery-count of the second attempt of %s", k)
	}
}

// A delivery that always fails is tried MaxDeliveries times in place, with
// delivery-count 0, 1, 2, and its last failure goes to the outcomer; each
// failure before it is reported to Failed with the wait that follows.
func TestRetryInPlaceStopsAtMaxDeliveries(t *testing.T) {
	var (
		mu     sync.Mutex
		counts []uint32
		waits  []time.Duration
		final  []uint32
	)
	h := func(_ context.Context, m *messages.Message) error {
		mu.Lock()
		defer mu.Unlock()
		counts = append(counts, m.DeliveryCount)
		return errFailed
	}
	rt := protocol.Retry{Backoff: time.Millisecond, MaxDeliveries: 3,
		Failed: func(_ context.Context, err error, _ *messages.Message, wait time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			waits = append(waits, wait)
		}}
	var verdicts atomic.Int64
	spec := retrySpec(1, h, rt, func(err error, m *messages.Message) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			final = append(final, m.DeliveryCount)
		}
	})
	r := newRigWith(t, spec, func(o messages.Outcome) {
		if o.Kind == messages.Modified {
			verdicts.Add(1)
		}
	})
	r.deliver(1, &messages.Message{Body: []byte("x")})
	require.Eventually(t, func() bool { return verdicts.Load() == 1 }, 10*time.Second, time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []uint32{0, 1, 2}, counts, "delivery-count of each attempt")
	require.Equal(t, []uint32{2}, final, "the outcomer sees the last attempt's failure")
	require.Len(t, waits, 2)
	require.GreaterOrEqual(t, waits[0], time.Millisecond)
	require.GreaterOrEqual(t, waits[1], 2*time.Millisecond)
}

// A failure the Retry does not call retryable (a handler's own verdict)
// is settled at once; without a Backoff nothing is retried in place.
func TestRetryInPlaceOnlyWhatIsRetryable(t *testing.T) {
	var calls atomic.Int64
	h := func(context.Context, *messages.Message) error { calls.Add(1); return errFailed }
	for name, rt := range map[string]protocol.Retry{
		"not retryable": {Backoff: time.Millisecond, MaxDeliveries: 5, Retryable: func(error) bool { return false }},
		"no backoff":    {MaxDeliveries: 5},
	} {
		t.Run(name, func(t *testing.T) {
			calls.Store(0)
			var verdicts atomic.Int64
			r := newRigWith(t, retrySpec(1, h, rt, nil), func(messages.Outcome) { verdicts.Add(1) })
			r.deliver(1, &messages.Message{Body: []byte("x")})
			require.Eventually(t, func() bool { return verdicts.Load() == 1 }, 10*time.Second, time.Millisecond)
			require.EqualValues(t, 1, calls.Load())
		})
	}
}

// A drain during the wait ends it: the failure is settled as any other
// (modified, for the broker to redeliver), and what the same link handed
// the partition after it is released unrun rather than overtake it.
func TestRetryWaitEndsAtDrain(t *testing.T) {
	draining := make(chan struct{})
	failedOnce := make(chan struct{})
	var calls atomic.Int64
	h := func(context.Context, *messages.Message) error {
		if calls.Add(1) == 1 {
			close(failedOnce)
		}
		return errFailed
	}
	var mu sync.Mutex
	var kinds []messages.OutcomeKind
	spec := retrySpec(1, h, protocol.Retry{Backoff: time.Hour, MaxDeliveries: 5}, nil)
	r := newRigWith(t, spec, func(o messages.Outcome) {
		mu.Lock()
		defer mu.Unlock()
		kinds = append(kinds, o.Kind)
	})
	for id := uint64(1); id <= 3; id++ {
		d := protocol.NewDelivery()
		d.ID, d.Link, d.Message, d.Ctx, d.To, d.Draining = id, 7, &messages.Message{Body: []byte("x")}, context.Background(), r.to, draining
		r.route(d)
	}
	select {
	case <-failedOnce:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never ran")
	}
	close(draining)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(kinds) == 3
	}, 10*time.Second, time.Millisecond)
	require.Equal(t, []messages.OutcomeKind{messages.Modified, messages.Released, messages.Released}, kinds)
	require.EqualValues(t, 1, calls.Load(), "nothing ran after the interrupted retry")
}

// Each wait is at least Backoff doubled per attempt and never shorter than
// the one before, until MaxBackoff caps it.
func TestRetryDelayGrows(t *testing.T) {
	rt := protocol.Retry{Backoff: 10 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}
	for range 100 {
		prev := time.Duration(0)
		for n := 1; n <= 10; n++ {
			d := rt.Delay(n)
			require.GreaterOrEqual(t, d, prev, "attempt %d", n)
			require.GreaterOrEqual(t, d, min(rt.Backoff<<(n-1), rt.MaxBackoff), "attempt %d", n)
			require.LessOrEqual(t, d, rt.MaxBackoff, "attempt %d", n)
			prev = d
		}
	}
	require.Equal(t, time.Second, (&protocol.Retry{Backoff: time.Second, MaxBackoff: time.Millisecond}).Delay(3), "MaxBackoff below Backoff means Backoff")
}
