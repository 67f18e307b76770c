package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// testGroupOrder: messages with the same group-id are handled one at a time,
// in order: 4 groups x 50 messages, interleaved at random on the queue. The
// first message of each group holds its partition until everything is
// published, so every partition has a backlog in which a message could
// overtake another.
func testGroupOrder(e *env) {
	q := e.queue("groups")
	const groups, perGroup = 4, 50
	var (
		mu       sync.Mutex
		order    = map[string][]uint32{}
		inFlight = map[string]int{}
		overlaps atomic.Int32
		total    atomic.Int32
	)
	published := e.gate()
	app := e.startedApp()
	e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		defer total.Add(1)
		mu.Lock()
		inFlight[m.GroupID]++
		if inFlight[m.GroupID] > 1 {
			overlaps.Add(1)
		}
		order[m.GroupID] = append(order[m.GroupID], m.GroupSequence)
		mu.Unlock()
		if m.GroupSequence == 1 && !published.wait() {
			return errors.New("never released")
		}
		runtime.Gosched() // a chance for another message of the group to overtake
		mu.Lock()
		inFlight[m.GroupID]--
		mu.Unlock()
		return nil
	}, amqpactor.WithPartitions(4))

	// A fixed random interleaving that keeps each group's own order.
	e.publishInterleaved(app, q, groups, perGroup, "group-", [2]uint64{1, 2})
	published.open()
	e.eventually(func() bool { return total.Load() == groups*perGroup }, "every message handled")
	require.Zero(e, overlaps.Load(), "two messages of one group ran at once")
	mu.Lock()
	defer mu.Unlock()
	require.Len(e, order, groups)
	for g, seq := range order {
		require.Len(e, seq, perGroup, "messages of %s", g)
		for i := 1; i < len(seq); i++ {
			require.Greater(e, seq[i], seq[i-1], "%s out of order at %d: %v", g, i, seq)
		}
	}
}

// testGroupsInParallel: different group-ids run in parallel: the handler of
// group A waits, bounded, until a handler of another group has started.
func testGroupsInParallel(e *env) {
	q := e.queue("parallel")
	aRunning := e.gate()
	otherStarted := e.gate()
	var sawOverlap atomic.Bool
	var handled atomic.Int32
	app := e.startedApp()
	e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		defer handled.Add(1)
		if m.GroupID == "A" {
			aRunning.open()
			sawOverlap.Store(otherStarted.wait())
			return nil
		}
		if aRunning.isOpen() {
			otherStarted.open()
		}
		return nil
	}, amqpactor.WithPartitions(8))
	// Eight other groups: at least one lands on another partition than A
	// (all eight hashing onto A's has probability 8^-8).
	e.publish(app, q, &amqpactor.Message{MessageID: "a", GroupID: "A"})
	e.await(aRunning, "group A's handler to start")
	for i := range 8 {
		e.publish(app, q, &amqpactor.Message{MessageID: fmt.Sprintf("b%d", i), GroupID: fmt.Sprintf("B%d", i)})
	}
	e.eventually(func() bool { return handled.Load() == 9 }, "every message handled")
	require.True(e, sawOverlap.Load(), "group A's handler blocked every other group: groups do not run in parallel")
}

// testRoundRobin: messages without a group-id are spread round robin over
// the partitions: four of them run at once on four partitions, and 40 are
// split 10/10/10/10.
func testRoundRobin(e *env) {
	q := e.queue("roundrobin")
	const parts = 4
	var started atomic.Int32
	allStarted := e.gate()
	var barrierFailed atomic.Bool
	var handled atomic.Int32
	app := e.startedApp()
	sub := e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		defer handled.Add(1)
		if m.Subject == "barrier" {
			if started.Add(1) == parts {
				allStarted.open()
			}
			if !allStarted.wait() {
				barrierFailed.Store(true)
			}
		}
		return nil
	}, amqpactor.WithPartitions(parts))
	for i := range parts {
		e.publish(app, q, &amqpactor.Message{MessageID: fmt.Sprintf("b%d", i), Subject: "barrier"})
	}
	e.await(allStarted, "four messages without group-id running at once on four partitions")
	for i := range 40 - parts {
		e.publish(app, q, &amqpactor.Message{MessageID: fmt.Sprintf("m%d", i)})
	}
	e.eventually(func() bool { return handled.Load() == 40 }, "every message handled")
	require.False(e, barrierFailed.Load())
	root := e.tree(app)
	s := subNode(root, sub)
	require.NotNil(e, s, "subscription node in\n%s", treeText(root))
	parts2 := ofKind(s, "partition")
	require.Len(e, parts2, parts)
	e.eventually(func() bool {
		var sum uint64
		for _, p := range ofKind(subNode(e.tree(app), sub), "partition") {
			sum += p.Counters["handled"]
		}
		return sum == 40
	}, "partition counters settle")
	for _, p := range ofKind(subNode(e.tree(app), sub), "partition") {
		require.EqualValues(e, 10, p.Counters["handled"], "%s handled: not round robin", p.Name)
	}
}

// testCreditBound: with WithCredit(5) and handlers that hold their
// deliveries, exactly 5 are held at once, never more; as handlers finish two
// at a time (half the window), two more come, never more.
func testCreditBound(e *env) {
	q := e.queue("credit")
	const credit, n = 5, 20
	var held, maxHeld, handled atomic.Int32
	tokens := make(chan struct{}, n)
	stop := e.gate()
	app := e.startedApp()
	sub := e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		h := held.Add(1)
		for {
			old := maxHeld.Load()
			if h <= old || maxHeld.CompareAndSwap(old, h) {
				break
			}
		}
		t := time.NewTimer(waitFor)
		defer t.Stop()
		defer held.Add(-1)
		select {
		case <-tokens:
			handled.Add(1)
			return nil
		case <-stop.ch:
		case <-t.C:
		}
		return errors.New("never released")
	}, amqpactor.WithCredit(credit), amqpactor.WithPartitions(2*credit))
	for _, id := range ids("c", n) {
		e.publish(app, q, msg(id))
	}
	b, hooks := e.hooks()
	// phase waits until k handlers have finished and the rest of the window
	// is held again.
	phase := func(k int) {
		e.Helper()
		want := min(credit, n-k)
		e.eventually(func() bool { return int(handled.Load()) == k && int(held.Load()) == want },
			"%d finished and %d held", k, want)
		if hooks {
			// The broker transfers as soon as there is credit: what is
			// out and what waits show that no more was granted.
			e.eventually(func() bool { return b.Unsettled(q.Name()) == want }, "%d out for delivery", want)
			require.Equal(e, n-k-want, b.QueueDepth(q.Name()), "messages waiting after %d finished", k)
		}
	}
	phase(0)
	require.Never(e, func() bool { return held.Load() > credit }, quiet, tick, "more deliveries than the credit")
	c := counters(app, sub)
	require.EqualValues(e, credit, c["delivered"], "deliveries received: %v", c)
	require.EqualValues(e, credit, c["unsettled"], "deliveries unsettled: %v", c)
	for k := 2; k <= n; k += 2 {
		tokens <- struct{}{}
		tokens <- struct{}{}
		phase(k)
	}
	require.EqualValues(e, credit, maxHeld.Load(), "most deliveries held at once")
}

// testPauseResume: Pause stops granting credit, so delivery stops once what
// was granted has arrived; Resume starts it again.
func testPauseResume(e *env) {
	q := e.queue("pause")
	const credit, n = 4, 10
	rec := &recorder{}
	app := e.startedApp()
	sub := e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		rec.add("h", m)
		return nil
	}, amqpactor.WithCredit(credit))
	sub.Pause()
	e.eventually(func() bool { return counters(app, sub)["paused"] == 1 }, "the receiver paused")
	for _, id := range ids("p", n) {
		e.publish(app, q, msg(id))
	}
	// The credit granted before the pause is used up, then nothing.
	e.eventually(func() bool { return rec.n() == credit }, "the credit granted before the pause used")
	if b, ok := e.hooks(); ok {
		e.eventually(func() bool { return b.Unsettled(q.Name()) == 0 }, "the paused deliveries settled")
		require.Equal(e, n-credit, b.QueueDepth(q.Name()), "messages waiting while paused")
	}
	require.Never(e, func() bool { return rec.n() > credit }, quiet, tick, "deliveries while paused")
	sub.Resume()
	e.eventually(func() bool { return rec.n() == n }, "every message handled after Resume")
	e.eventually(func() bool { return counters(app, sub)["paused"] == 0 }, "the receiver resumed")
	e.stop(app)
	e.requireEachOnce(rec, ids("p", n))
}

// testPauseBeforeStart: a subscription paused before Start attaches
// without taking deliveries; Resume starts them.
func testPauseBeforeStart(e *env) {
	q := e.queue("pausedstart")
	rec := &recorder{}
	app := e.newApp()
	sub := e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error { rec.add("h", m); return nil })
	sub.Pause()
	e.start(app)
	e.eventually(func() bool { return counters(app, sub)["paused"] == 1 }, "the receiver paused")
	for _, id := range ids("p", 5) {
		e.publish(app, q, msg(id))
	}
	if b, ok := e.hooks(); ok {
		require.Equal(e, 5, b.QueueDepth(q.Name()), "messages waiting for a subscription paused before Start")
	}
	require.Never(e, func() bool { return rec.n() > 0 }, quiet, tick, "deliveries to a subscription paused before Start")
	sub.Resume()
	e.eventually(func() bool { return rec.n() == 5 }, "every message handled after Resume")
}

// testPauseAcrossReattach (FaultHooks): a paused subscription whose link the
// broker detaches re-attaches still paused: the new link gets no credit.
func testPauseAcrossReattach(e *env) {
	b := e.needHooks()
	q := e.queue("pausedetach")
	rec := &recorder{}
	app := e.startedApp()
	sub := e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error { rec.add("h", m); return nil },
		amqpactor.WithCredit(4))
	sub.Pause()
	e.eventually(func() bool { return counters(app, sub)["paused"] == 1 }, "the receiver paused")
	require.Equal(e, 1, b.DetachLinks(q, "amqp:internal-error", "test detach"))
	e.eventually(func() bool {
		root, err := treeOf(app)
		if err != nil {
			return false
		}
		r := receiverOf(root, sub)
		return r != nil && r.State == "attached" && r.Restarts == 1
	}, "the receiver attached again")
	for _, id := range ids("p", 5) {
		e.publish(app, q, msg(id))
	}
	require.Equal(e, 5, b.QueueDepth(q.Name()), "messages waiting: the re-attached paused link was granted credit")
	sub.Resume()
	e.eventually(func() bool { return rec.n() == 5 }, "every message handled after Resume")
}

// batchRecorder records batches.
type batchRecorder struct {
	mu      sync.Mutex
	batches [][]*amqpactor.Message
}

func (r *batchRecorder) add(ms []*amqpactor.Message) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, append([]*amqpactor.Message(nil), ms...))
	return len(r.batches)
}

func (r *batchRecorder) snapshot() [][]*amqpactor.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]*amqpactor.Message(nil), r.batches...)
}

func (r *batchRecorder) messages() int {
	n := 0
	for _, b := range r.snapshot() {
		n += len(b)
	}
	return n
}

// testBatchCappedByCredit: a batch is never larger than the credit
// (WithCredit(10), WithBatch(100, wait)). With the usual 50 ms wait that is
// all one can see; with a wait far beyond the test's bound, batches come at
// all only because a full window is a full batch, so each is exactly 10.
func testBatchCappedByCredit(e *env) {
	const credit, n = 10, 200
	for _, wait := range []time.Duration{50 * time.Millisecond, time.Hour} {
		q := e.queue("batchcredit")
		rec := &batchRecorder{}
		published := e.gate()
		app := e.startedApp()
		_, err := app.SubscribeBatch(q, func(ctx context.Context, ms []*amqpactor.Message) error {
			if rec.add(ms) == 1 && !published.wait() {
				return errors.New("never released")
			}
			return nil
		}, amqpactor.WithCredit(credit), amqpactor.WithBatch(100, wait))
		require.NoError(e, err)
		want := ids("b", n)
		for _, id := range want {
			e.publish(app, q, msg(id))
		}
		published.open()
		e.eventually(func() bool { return rec.messages() >= n }, "every message in a batch (wait %v)", wait)
		e.stop(app)
		seen := map[any]int{}
		for i, b := range rec.snapshot() {
			require.NotEmpty(e, b, "batch %d is empty (wait %v)", i, wait)
			require.LessOrEqual(e, len(b), credit, "batch %d is larger than the credit (wait %v)", i, wait)
			if wait == time.Hour {
				require.Len(e, b, credit, "batch %d: with more waiting, a batch is a full window", i)
			}
			for _, m := range b {
				seen[m.MessageID]++
			}
		}
		require.Len(e, seen, n)
		for _, id := range want {
			require.Equal(e, 1, seen[id], "batches holding %s (wait %v)", id, wait)
		}
	}
}

// testBatchCappedBySize: a batch is never larger than the batch size, and a
// failed batch's outcome applies to every message in it.
func testBatchCappedBySize(e *env) {
	q := e.queue("batchsize")
	const size, n = 7, 100
	rec := &batchRecorder{}
	published := e.gate()
	app := e.startedApp()
	sub, err := app.SubscribeBatch(q, func(ctx context.Context, ms []*amqpactor.Message) error {
		if rec.add(ms) == 1 {
			if !published.wait() {
				return errors.New("never released")
			}
			return errors.New("the first batch fails")
		}
		return nil
	}, amqpactor.WithBatch(size, 50*time.Millisecond))
	require.NoError(e, err)
	want := ids("b", n)
	for _, id := range want {
		e.publish(app, q, msg(id))
	}
	published.open()
	batches := func() [][]*amqpactor.Message { return rec.snapshot() }
	e.eventually(func() bool {
		bs := batches()
		return len(bs) > 0 && rec.messages() >= n+len(bs[0])
	}, "every message accepted in a batch")
	bs := batches()
	first := bs[0]
	e.eventually(func() bool {
		return countersAre(app, sub, map[string]uint64{"modified": uint64(len(first)), "accepted": n})
	}, "the first batch modified, everything accepted in the end")
	e.stop(app)
	bs = batches()
	full := false
	seen := map[any]int{}
	for i, b := range bs {
		require.NotEmpty(e, b, "batch %d is empty", i)
		require.LessOrEqual(e, len(b), size, "batch %d is larger than the batch size", i)
		full = full || len(b) == size
		for _, m := range b {
			seen[m.MessageID]++
		}
	}
	require.True(e, full, "no batch reached the batch size although messages were waiting")
	inFirst := map[any]bool{}
	for _, m := range first {
		inFirst[m.MessageID] = true
	}
	for _, id := range want {
		wantCalls := 1
		if inFirst[id] {
			wantCalls = 2
		}
		require.Equal(e, wantCalls, seen[id], "batches holding %s", id)
	}
	if e.f.Features.DeliveryCountOnModified {
		for _, b := range bs[1:] {
			for _, m := range b {
				if inFirst[m.MessageID] {
					require.EqualValues(e, 1, m.DeliveryCount, "redelivery of %v after the failed batch", m.MessageID)
				}
			}
		}
	}
}
