package connection

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/test/kit/faketransport"
	"github.com/amqpactor/amqpactor/transport"
)

// gated is a fake connector whose dials, once held, wait until released,
// so a test decides when a dial's answer reaches the actor.
type gated struct {
	*faketransport.Connector
	mu      sync.Mutex
	gate    chan struct{} // nil: dials go through
	entered atomic.Int64  // dials that began while held
}

func (g *gated) hold() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gated) release() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

func (g *gated) Connect(ctx context.Context) (transport.Conn, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		g.entered.Add(1)
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Connector.Connect(ctx)
}

// Seed 528 of test/chaos: the connection actor was resumed after a panic
// while it waited out its reconnect backoff, and dialled at once; the
// backoff's timer had fired already, so its redial came next and dialled a
// second time. Both connections were adopted, the second over the first,
// whose watcher nobody cancelled and which nobody closed: App.Stop waited
// its whole bound for that goroutine and left it behind. One dial at a
// time, and never a second connection over a live one.
func TestResumedDuringBackoffDialsOnce(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	// A backoff far longer than the test: only the messages below dial.
	env.Backoff = actors.Backoff{Initial: time.Hour, Max: time.Hour}
	g := &gated{Connector: &faketransport.Connector{}}
	started := make(chan Started, 1)
	pid := sys.Root.Spawn(New(env, g, started))
	select {
	case s := <-started:
		require.NoError(t, s.Err)
	case <-time.After(faketransport.Bound):
		t.Fatal("the first dial was never answered")
	}
	state := func() string { return faketransport.Describe(t, sys, pid).Node.State }

	g.hold()
	t.Cleanup(g.release)
	g.Last().Drop("cut")
	require.Eventually(t, func() bool { return state() == protocol.StateRestarting }, faketransport.Bound, time.Millisecond,
		"after the cut the redial waits out the backoff")
	// The resume and the timer's redial, in the order the race gave them
	// (the root forwards both to the connection actor, in order).
	sys.Root.Send(pid, &resumed{reason: "test"})
	sys.Root.Send(pid, &redial{attempt: 1})
	_ = state() // both handled: the Describe queued after them is answered
	require.Eventually(t, func() bool { return g.entered.Load() >= 1 }, faketransport.Bound, time.Millisecond,
		"the resumed actor dials")
	require.Never(t, func() bool { return g.entered.Load() > 1 }, 100*time.Millisecond, time.Millisecond,
		"a redial during a dial under way dialled again")
	g.release()
	require.Eventually(t, func() bool { return state() == protocol.StateAttached }, faketransport.Bound, time.Millisecond)

	require.NoError(t, faketransport.Drain(t, sys, pid))
	require.NoError(t, sys.Root.PoisonFuture(pid).Wait())
	for i, c := range g.Conns() {
		require.True(t, c.Closed(), "connection %d of %d left open", i+1, len(g.Conns()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), faketransport.Bound)
	defer cancel()
	require.NoError(t, env.Wait(ctx), "a watcher outlived the drain")
}

// A dial's connection that comes while another is live (two dials raced)
// is closed, not adopted over the live one and its watcher.
func TestSecondConnectionIsClosedNotAdopted(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	env.Backoff = actors.Backoff{Initial: time.Hour, Max: time.Hour}
	g := &gated{Connector: &faketransport.Connector{}}
	started := make(chan Started, 1)
	pid := sys.Root.Spawn(New(env, g, started))
	select {
	case s := <-started:
		require.NoError(t, s.Err)
	case <-time.After(faketransport.Bound):
		t.Fatal("the first dial was never answered")
	}
	first := g.Last()
	// A dial's answer the actor did not ask for, as a raced dial's would be.
	extra, err := g.Connector.Connect(context.Background())
	require.NoError(t, err)
	h := &handoff{cancel: func() {}}
	require.True(t, h.give(extra))
	sys.Root.Send(pid, &dialed{attempt: 1, h: h})
	require.Eventually(t, func() bool { return g.Last().Closed() }, faketransport.Bound, time.Millisecond,
		"the second connection is closed")
	require.False(t, first.Closed(), "the live connection is kept")
	require.Equal(t, protocol.StateAttached, faketransport.Describe(t, sys, pid).Node.State)

	require.NoError(t, faketransport.Drain(t, sys, pid))
	require.NoError(t, sys.Root.PoisonFuture(pid).Wait())
	require.True(t, first.Closed(), "the drain closes the live connection")
	ctx, cancel := context.WithTimeout(context.Background(), faketransport.Bound)
	defer cancel()
	require.NoError(t, env.Wait(ctx), "a watcher outlived the drain")
}
