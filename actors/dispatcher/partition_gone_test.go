package dispatcher_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/dispatcher"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/messages"
)

// hold, sent to an actor of a rig built with holds, keeps its mailbox run
// inside the message until release is closed; entered is closed once it is.
type hold struct{ entered, release chan struct{} }

func newHold() *hold { return &hold{entered: make(chan struct{}), release: make(chan struct{})} }

func holds(env *actors.Env) {
	env.Middleware = append(env.Middleware, func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, e *actor.MessageEnvelope) {
			if h, ok := e.Message.(*hold); ok {
				close(h.entered)
				<-h.release
				return
			}
			next(c, e)
		}
	})
}

// stopAtFirstFailure makes every supervisor of the rig stop a child that
// panics, as one whose restart budget is spent does.
func stopAtFirstFailure(env *actors.Env) {
	env.Supervisor = actor.NewOneForOneStrategy(0, time.Minute, actor.DefaultDecider)
}

// ledger counts, per delivery id, the handler's runs and the settlements.
type ledger struct {
	mu      sync.Mutex
	runs    map[int][]int // by group: the ids in the order they ran
	handled map[uint64]int
	settled map[uint64]int
	total   atomic.Int64
}

func newLedger() *ledger {
	return &ledger{runs: map[int][]int{}, handled: map[uint64]int{}, settled: map[uint64]int{}}
}

func (l *ledger) handle(m *messages.Message) {
	id, _ := strconv.Atoi(string(m.Body))
	g, _ := strconv.Atoi(m.GroupID)
	l.mu.Lock()
	l.runs[g] = append(l.runs[g], id)
	l.handled[uint64(id)]++
	l.mu.Unlock()
}

func (l *ledger) Settle(ds []*protocol.Delivery, _ *actor.PID) {
	l.mu.Lock()
	for _, d := range ds {
		l.settled[d.ID]++
		d.Release()
	}
	l.mu.Unlock()
	l.total.Add(int64(len(ds)))
}

// exactlyOnce checks that ids 1..n were each handled and settled once, and
// each group's in the order sent.
func (l *ledger) exactlyOnce(t *testing.T, n int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := uint64(1); id <= uint64(n); id++ {
		require.Equal(t, 1, l.handled[id], "delivery %d handled", id)
		require.Equal(t, 1, l.settled[id], "delivery %d settled", id)
	}
	for g, ids := range l.runs {
		for i := 1; i < len(ids); i++ {
			require.Less(t, ids[i-1], ids[i], "group %d out of order: %v", g, ids)
		}
	}
}

func (r *rig) send(l *ledger, from, to int, groups int) {
	for id := from; id <= to; id++ {
		d := protocol.NewDelivery()
		d.ID, d.Ctx, d.To = uint64(id), context.Background(), l
		d.Message = &messages.Message{GroupID: strconv.Itoa(id % groups), Body: []byte(strconv.Itoa(id))}
		r.route(d)
	}
}

// partitionPIDs returns the dispatcher's partitions as it describes them.
func (r *rig) partitionPIDs(t *testing.T) []*actor.PID {
	return r.describe(t, r.disp).Children
}

// A partition its supervisor stops for good, with batches in its mailbox
// and a worker busy with what it took, is started again by the dispatcher:
// the new incarnation waits for the old worker (and says it restarts),
// then takes the queue and the batches that were in transit to the dead
// one. Every delivery is handled and settled exactly once, each group in
// order, so all the credit returns.
func TestStoppedPartitionInTransitHandledOnce(t *testing.T) {
	const n, groups = 200, 3
	l := newLedger()
	gate := make(chan struct{})
	running := make(chan struct{}, n)
	handler := func(_ context.Context, m *messages.Message) error {
		running <- struct{}{}
		<-gate
		l.handle(m)
		return nil
	}
	r := newRig(t, 1, handler, nil, holds, stopAtFirstFailure)
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	t.Cleanup(open) // before the rig stops: a failed test leaves no worker waiting
	r.send(l, 1, 20, groups)
	<-running // the worker holds what it took

	old := r.partitionPIDs(t)[0]
	h := newHold()
	r.sys.Root.Send(old, h)
	<-h.entered
	r.sys.Root.Send(old, &testhook.Crash{Reason: "test"})
	r.send(l, 21, n, groups) // routed into the mailbox of a partition about to die
	require.EqualValues(t, n, r.describe(t, r.disp).Node.Counters["routed"])
	close(h.release)

	// The dispatcher starts partition-0 again; its worker waits for the old one.
	require.Eventually(t, func() bool {
		return r.describe(t, r.disp).Node.Counters["replaced"] == 1
	}, 10*time.Second, time.Millisecond, "the dispatcher never started the stopped partition again")
	d := r.describe(t, r.disp)
	require.Len(t, d.Children, 1)
	_, alive := r.sys.ProcessRegistry.GetLocal(d.Children[0].Id)
	require.True(t, alive, "the dispatcher lists a dead partition")
	require.Contains(t, d.Node.LastError, "partition-0")
	p := r.describe(t, d.Children[0]).Node
	require.Equal(t, protocol.StateRestarting, p.State, "a partition waiting for its predecessor's worker")

	open()
	require.Eventually(t, func() bool { return l.total.Load() >= n }, 10*time.Second, time.Millisecond,
		"settled %d of %d", l.total.Load(), n)
	l.exactlyOnce(t, n)
	require.EqualValues(t, n, l.total.Load(), "settled more than once")
	require.Eventually(t, func() bool {
		return r.describe(t, r.partitionPIDs(t)[0]).Node.State == protocol.StateAttached
	}, 10*time.Second, time.Millisecond, "the partition says attached once its queue is its own")
	d = r.describe(t, r.disp)
	require.Equal(t, protocol.StateAttached, d.Node.State)
	t.Logf("handled %d, settled %d, dispatcher %s (%s)", n, l.total.Load(), d.Node.State, d.Node.LastError)
}

// The dispatcher starts a stopped partition again within its budget
// (Router.Restarts); past it, it fails itself with an error that names the
// partition, so that its own supervisor decides. Its next incarnation
// carries on with the same queues: nothing is lost either way.
func TestPartitionRestartBudgetHolds(t *testing.T) {
	const groups = 2
	l := newLedger()
	handler := func(_ context.Context, m *messages.Message) error { l.handle(m); return nil }
	r := newRigBudget(t, 2, handler, actors.Restarts{Max: 2, Within: time.Minute}, stopAtFirstFailure)

	var mu sync.Mutex
	var escalated []any
	sub := r.sys.EventStream.Subscribe(func(ev any) {
		if e, ok := ev.(*actor.SupervisorEvent); ok && e.Child.Equal(r.disp) {
			mu.Lock()
			escalated = append(escalated, e.Reason)
			mu.Unlock()
		}
	})
	defer r.sys.EventStream.Unsubscribe(sub)

	sent := 0
	for round := 1; round <= 3; round++ {
		r.send(l, sent+1, sent+50, groups)
		sent += 50
		require.Eventually(t, func() bool { return l.total.Load() == int64(sent) }, 10*time.Second, time.Millisecond)
		r.sys.Root.Send(r.partitionPIDs(t)[round%2], &testhook.Crash{Reason: "test"})
		if round < 3 {
			require.Eventually(t, func() bool {
				return r.describe(t, r.disp).Node.Counters["replaced"] == uint64(round)
			}, 10*time.Second, time.Millisecond, "round %d: not started again", round)
			mu.Lock()
			require.Empty(t, escalated, "round %d: failed within its budget", round)
			mu.Unlock()
		}
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(escalated) == 1
	}, 10*time.Second, time.Millisecond, "the dispatcher did not fail past its budget")
	mu.Lock()
	err, ok := escalated[0].(error)
	mu.Unlock()
	require.True(t, ok, "the dispatcher fails with an error")
	require.Contains(t, err.Error(), "partition-1")
	require.Contains(t, err.Error(), "bench")
	require.Contains(t, err.Error(), "restart budget")

	// Restarted by its own supervisor, it still handles what comes.
	r.send(l, sent+1, sent+50, groups)
	sent += 50
	require.Eventually(t, func() bool { return l.total.Load() == int64(sent) }, 10*time.Second, time.Millisecond)
	l.exactlyOnce(t, sent)
	d := r.describe(t, r.disp)
	require.EqualValues(t, 1, d.Node.Counters["panics"])
	require.Equal(t, protocol.StateAttached, d.Node.State)
	require.Contains(t, d.Node.LastError, "partition-1")
	for _, pid := range d.Children {
		_, alive := r.sys.ProcessRegistry.GetLocal(pid.Id)
		require.True(t, alive, "the dispatcher lists a dead partition %s", pid.Id)
	}
	t.Logf("escalated with %q", strings.TrimSpace(err.Error()))
}

// newRigBudget is newRig with the dispatcher's budget for starting its
// partitions again.
func newRigBudget(tb testing.TB, partitions int, handler protocol.Handler, budget actors.Restarts, tune ...func(*actors.Env)) *rig {
	spec := &protocol.SubscriptionSpec{
		Address: address.Queue("bench"), Partitions: partitions, Handler: handler,
		Outcome: func(context.Context, error, *messages.Message) messages.Outcome {
			return messages.Outcome{Kind: messages.Accepted}
		},
	}
	rt := dispatcher.NewRouter(spec)
	rt.Restarts = budget
	return newRigOn(tb, spec, rt, nil, tune...)
}

// A supervisor that resumes the dispatcher after it failed for a partition
// (past its budget) chose to carry on: the next batch for that partition
// starts it again, and nothing routed meanwhile is lost.
func TestResumedDispatcherStartsThePartitionAgain(t *testing.T) {
	// Enough groups that both partitions get some under any hash seed.
	const groups = 16
	l := newLedger()
	handler := func(_ context.Context, m *messages.Message) error { l.handle(m); return nil }
	spec := &protocol.SubscriptionSpec{
		Address: address.Queue("bench"), Partitions: 2, Handler: handler,
		Outcome: func(context.Context, error, *messages.Message) messages.Outcome {
			return messages.Outcome{Kind: messages.Accepted}
		},
	}
	rt := dispatcher.NewRouter(spec)
	rt.Restarts = actors.Restarts{Max: 1, Within: time.Minute}
	resume := actor.NewOneForOneStrategy(10, time.Minute, func(any) actor.Directive { return actor.ResumeDirective })
	r := newRigUnder(t, spec, rt, resume, nil, stopAtFirstFailure)

	r.send(l, 1, 50, groups)
	require.Eventually(t, func() bool { return l.total.Load() == 50 }, 10*time.Second, time.Millisecond)
	for round := 1; round <= 2; round++ {
		r.sys.Root.Send(r.partitionPIDs(t)[0], &testhook.Crash{Reason: "test"})
		require.Eventually(t, func() bool {
			d := r.describe(t, r.disp)
			return d.Node.Counters["replaced"] == 1 && (round == 1 || d.Node.State == protocol.StateRestarting)
		}, 10*time.Second, time.Millisecond, "round %d", round)
	}
	d := r.describe(t, r.disp)
	require.Len(t, d.Children, 1, "the stopped partition is not drawn")
	r.send(l, 51, 100, groups)
	require.Eventually(t, func() bool { return l.total.Load() == 100 }, 10*time.Second, time.Millisecond)
	l.exactlyOnce(t, 100)
	d = r.describe(t, r.disp)
	require.Equal(t, protocol.StateAttached, d.Node.State)
	require.Len(t, d.Children, 2)
}
