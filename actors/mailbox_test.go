package actors

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// invoked records what a mailbox hands on, in order.
type invoked struct {
	mu        sync.Mutex
	user, sys []any
	failures  []any
}

func (r *invoked) InvokeSystemMessage(m any) { r.mu.Lock(); r.sys = append(r.sys, m); r.mu.Unlock() }
func (r *invoked) InvokeUserMessage(m any) {
	if m == "boom" {
		panic("boom")
	}
	r.mu.Lock()
	r.user = append(r.user, m)
	r.mu.Unlock()
}
func (r *invoked) EscalateFailure(reason, m any) {
	r.mu.Lock()
	r.failures = append(r.failures, reason, m)
	r.mu.Unlock()
}

// inline runs what it is given at once, as a mailbox run on the caller.
type inline struct{}

func (inline) Schedule(fn func()) { fn() }
func (inline) Throughput() int    { return 300 }

// held queues what it is given until run, so a test decides when a
// mailbox runs.
type held struct{ fns []func() }

func (h *held) Schedule(fn func()) { h.fns = append(h.fns, fn) }
func (h *held) Throughput() int    { return 2 }
func (h *held) run() {
	for len(h.fns) > 0 {
		fn := h.fns[0]
		h.fns = h.fns[1:]
		fn()
	}
}

func TestMailboxSystemMessagesFirstAndSuspension(t *testing.T) {
	rec, d := &invoked{}, &held{}
	m := newMailbox()
	m.RegisterHandlers(rec, d)
	m.PostUserMessage(1)
	m.PostSystemMessage("s1")
	m.PostUserMessage(2)
	require.Len(t, d.fns, 1, "one run scheduled for all three posts")
	d.run()
	require.Equal(t, []any{"s1"}, rec.sys)
	require.Equal(t, []any{1, 2}, rec.user, "user messages in order, after the system message")

	m.PostSystemMessage(&actor.SuspendMailbox{})
	m.PostUserMessage(3)
	d.run()
	require.Equal(t, []any{1, 2}, rec.user, "nothing but system messages while suspended")
	require.Equal(t, 1, m.UserMessageCount())
	m.PostSystemMessage("s2")
	m.PostSystemMessage(&actor.ResumeMailbox{})
	d.run()
	require.Equal(t, []any{"s1", "s2"}, rec.sys, "suspend and resume are the mailbox's own")
	require.Equal(t, []any{1, 2, 3}, rec.user)
	require.Zero(t, m.UserMessageCount())
}

func TestMailboxEscalatesAPanicWithItsMessage(t *testing.T) {
	rec := &invoked{}
	m := newMailbox()
	m.RegisterHandlers(rec, inline{})
	m.PostUserMessage("boom")
	require.Equal(t, []any{"boom", "boom"}, rec.failures, "the reason and the message it happened on")
	m.PostUserMessage(4)
	require.Equal(t, []any{4}, rec.user, "the mailbox runs on after a failure")
}

// Many posting goroutines, one run at a time: every message once, each
// poster's in its order.
func TestMailboxOrderPerPosterUnderConcurrency(t *testing.T) {
	const posters, each = 4, 5000
	var running, overlaps atomic.Int32
	got := make([][]int, posters)
	var mu sync.Mutex
	inv := invokerFunc(func(m any) {
		if running.Add(1) > 1 {
			overlaps.Add(1)
		}
		v := m.([2]int)
		mu.Lock()
		got[v[0]] = append(got[v[0]], v[1])
		mu.Unlock()
		running.Add(-1)
	})
	m := newMailbox()
	m.RegisterHandlers(inv, goDispatcher{})
	var wg sync.WaitGroup
	for p := range posters {
		wg.Go(func() {
			for i := range each {
				m.PostUserMessage([2]int{p, i})
			}
		})
	}
	wg.Wait()
	require.Eventually(t, func() bool { return m.UserMessageCount() == 0 }, 10*time.Second, time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Zero(t, overlaps.Load(), "one run at a time")
	for p := range posters {
		require.Len(t, got[p], each)
		for i, v := range got[p] {
			require.Equal(t, i, v, "poster %d's messages in order", p)
		}
	}
}

type invokerFunc func(any)

func (f invokerFunc) InvokeSystemMessage(any)  {}
func (f invokerFunc) InvokeUserMessage(m any)  { f(m) }
func (f invokerFunc) EscalateFailure(any, any) {}

// goDispatcher runs each mailbox run on a goroutine of its own.
type goDispatcher struct{}

func (goDispatcher) Schedule(fn func()) { go fn() }
func (goDispatcher) Throughput() int    { return 300 }

// A post and its run allocate nothing once the mailbox's buffers have
// grown: deliveries and dispositions cross three mailboxes each.
func TestMailboxPostAllocatesNothing(t *testing.T) {
	var n int
	m := newMailbox()
	m.RegisterHandlers(invokerFunc(func(any) { n++ }), inline{})
	msg := new(int)
	for range 100 {
		m.PostUserMessage(msg)
	}
	allocs := testing.AllocsPerRun(1000, func() { m.PostUserMessage(msg) })
	require.Zero(t, allocs)
	require.Equal(t, 1100+1, n) // AllocsPerRun runs the function once more to warm up
}

// Under a real actor system the mailbox keeps protoactor's supervision: a
// panic restarts the actor and the messages after it are received.
func TestMailboxUnderSupervision(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()
	env := &Env{Root: sys.Root}
	var restarts, got atomic.Int32
	pid := sys.Root.Spawn(env.Props(func() actor.Actor {
		return actor.ReceiveFunc(func(c actor.Context) {
			switch m := c.Message().(type) {
			case *actor.Restarting:
				restarts.Add(1)
			case string:
				if m == "boom" {
					panic(m)
				}
				got.Add(1)
			}
		})
	}))
	sys.Root.Send(pid, "a")
	sys.Root.Send(pid, "boom")
	sys.Root.Send(pid, "b")
	require.Eventually(t, func() bool { return got.Load() == 2 && restarts.Load() == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, sys.Root.StopFuture(pid).Wait())
}
