package sender_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/sender"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/publish"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// countingSession attaches links that record every message they send.
type countingSession struct {
	mu    sync.Mutex
	sent  map[string]int
	links int
}

func (s *countingSession) NewSender(context.Context, transport.SenderOptions) (transport.Sender, error) {
	// An attach takes a while: publishes wait for it in the sender.
	time.Sleep(2 * time.Millisecond)
	s.mu.Lock()
	s.links++
	s.mu.Unlock()
	return &countingLink{s: s}, nil
}

func (s *countingSession) NewReceiver(context.Context, transport.ReceiverOptions) (transport.Receiver, error) {
	return nil, fmt.Errorf("fake: no receivers")
}

func (s *countingSession) Close(context.Context) error { return nil }

type countingLink struct{ s *countingSession }

func (l *countingLink) Send(_ context.Context, m *amqp.Message, _ bool) (transport.Receipt, error) {
	l.s.mu.Lock()
	l.s.sent[string(m.GetData())]++
	l.s.mu.Unlock()
	return accepted{}, nil
}

func (l *countingLink) Address() string             { return "fake" }
func (l *countingLink) Close(context.Context) error { return nil }

// parent routes publishes as the publisher does: on the sender's lane, or
// to its mailbox; what the sender hands back comes here and goes again.
type parent struct {
	env   *actors.Env
	sess  transport.Session
	lane  *publish.Lane
	child *actor.PID
	ready chan *actor.PID
}

func (p *parent) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.lane = publish.NewLane()
		p.child = ctx.Spawn(sender.New(p.env, sender.Config{Address: address.Queue("q"), Session: p.sess, Lane: p.lane}))
		p.ready <- p.child
	case *protocol.Publish:
		if !p.lane.Offer(m) {
			ctx.Send(p.child, m)
		}
	}
}

// A sender that panics mid-stream, ten times, five of them while its
// attach is in flight, loses no publish: what
// waited in the dead incarnation goes back through the parent, what its
// writer had goes out on its link, and the next incarnation takes the rest.
func TestRestartMidStream(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()
	env := &actors.Env{Root: sys.Root, Log: slog.New(slog.DiscardHandler), CloseTimeout: 5 * time.Second,
		Backoff: actors.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}}
	sess := &countingSession{sent: map[string]int{}}
	ready := make(chan *actor.PID, 1)
	ppid := sys.Root.Spawn(env.Props(func() actor.Actor { return &parent{env: env, sess: sess, ready: ready} },
		actor.WithSupervisor(actors.Supervisor())))
	pid := <-ready

	const n, crashes = 10000, 5
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, n)
	for i := range n {
		sys.Root.Send(ppid, &protocol.Publish{Ctx: ctx, Address: address.Queue("q"),
			Message: amqp.NewMessage(fmt.Appendf(nil, "%d", i)), Done: done})
		// Twice close together: the second incarnation panics while
		// its attach is in flight, with publishes waiting for it.
		if j := i % (n / crashes); j == n/(2*crashes) || j == n/(2*crashes)+300 {
			sys.Root.Send(pid, &testhook.Crash{Reason: "test"})
		}
	}
	for range n {
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-ctx.Done():
			t.Fatal("a publish was never answered")
		}
	}
	sess.mu.Lock()
	lost, dups := 0, 0
	for i := range n {
		c := sess.sent[fmt.Sprint(i)]
		if c == 0 {
			lost++
		}
		dups += max(c-1, 0)
	}
	links := sess.links
	sess.mu.Unlock()
	res, err := sys.Root.RequestFuture(pid, &protocol.Describe{}, time.Second).Result()
	require.NoError(t, err)
	node := res.(*protocol.Described).Node
	t.Logf("lost %d, duplicates %d, links %d", lost, dups, links)
	require.Zero(t, lost)
	require.EqualValues(t, 2*crashes, node.Counters["panics"], "the tree shows every restart")
	require.GreaterOrEqual(t, node.Restarts, 2*crashes)

	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	drained := make(chan error, 1)
	sys.Root.Send(pid, &protocol.Drain{Ctx: dctx, Done: drained})
	require.NoError(t, <-drained)
	require.NoError(t, sys.Root.PoisonFuture(ppid).Wait())
	require.NoError(t, env.Wait(dctx), "every goroutine of every incarnation ended")
}

// A drained sender that panics stays drained: its next incarnation never
// attaches and answers publishes ErrStopped.
func TestRestartAfterDrainStaysDrained(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()
	env := &actors.Env{Root: sys.Root, Log: slog.New(slog.DiscardHandler), CloseTimeout: 5 * time.Second,
		Backoff: actors.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}}
	sess := &countingSession{sent: map[string]int{}}
	ready := make(chan *actor.PID, 1)
	ppid := sys.Root.Spawn(env.Props(func() actor.Actor { return &parent{env: env, sess: sess, ready: ready} },
		actor.WithSupervisor(actors.Supervisor())))
	pid := <-ready
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	publishOne := func() error {
		done := make(chan error, 1)
		sys.Root.Send(ppid, &protocol.Publish{Ctx: ctx, Address: address.Queue("q"), Message: amqp.NewMessage([]byte("x")), Done: done})
		return <-done
	}
	require.NoError(t, publishOne())
	drained := make(chan error, 1)
	sys.Root.Send(pid, &protocol.Drain{Ctx: ctx, Done: drained})
	require.NoError(t, <-drained)
	sys.Root.Send(pid, &testhook.Crash{Reason: "test"})
	require.ErrorIs(t, publishOne(), protocol.ErrStopped)
	sess.mu.Lock()
	links := sess.links
	sess.mu.Unlock()
	require.Equal(t, 1, links, "the next incarnation did not attach")
	require.NoError(t, sys.Root.PoisonFuture(ppid).Wait())
	require.NoError(t, env.Wait(ctx))
}

// heldSession attaches links whose outcomes wait until fail is closed, and
// then never come: the link is gone.
type heldSession struct{ fail chan struct{} }

func (s *heldSession) NewSender(context.Context, transport.SenderOptions) (transport.Sender, error) {
	return &heldLink{fail: s.fail}, nil
}

func (s *heldSession) NewReceiver(context.Context, transport.ReceiverOptions) (transport.Receiver, error) {
	return nil, fmt.Errorf("fake: no receivers")
}

func (s *heldSession) Close(context.Context) error { return nil }

type heldLink struct{ fail chan struct{} }

func (l *heldLink) Send(context.Context, *amqp.Message, bool) (transport.Receipt, error) {
	return heldReceipt{l.fail}, nil
}
func (l *heldLink) Address() string             { return "fake" }
func (l *heldLink) Close(context.Context) error { return nil }

type heldReceipt struct{ fail chan struct{} }

func (r heldReceipt) Wait(ctx context.Context) (messages.Outcome, error) {
	select {
	case <-r.fail:
		return messages.Outcome{}, &transport.LinkError{Address: "q", Op: "send", Err: &amqp.LinkError{}}
	case <-ctx.Done():
		return messages.Outcome{}, ctx.Err()
	}
}

// A sender stopped while its publisher lives (by its supervisor, or by a
// restarting publisher) lets its link finish; when that link then fails,
// what it never had confirmed reaches the publisher (HandTo), not the
// stopped sender's mailbox, which is gone.
func TestHandOffLinkFailingAfterStopReachesHandTo(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()
	env := &actors.Env{Root: sys.Root, Log: slog.New(slog.DiscardHandler), CloseTimeout: 5 * time.Second,
		Backoff: actors.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}}
	handed := make(chan *protocol.Publish, 10)
	probe := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if p, ok := c.Message().(*protocol.Publish); ok {
			handed <- p
		}
	}))
	sess := &heldSession{fail: make(chan struct{})}
	lane := publish.NewLane()
	pid := sys.Root.Spawn(sender.New(env, sender.Config{Address: address.Queue("q"), Session: sess, Lane: lane,
		HandTo: probe}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const n = 5
	done := make(chan error, n)
	for i := range n {
		sys.Root.Send(pid, &protocol.Publish{Ctx: ctx, Address: address.Queue("q"),
			Message: amqp.NewMessage(fmt.Appendf(nil, "%d", i)), Done: done})
	}
	// All written, none confirmed.
	require.Eventually(t, func() bool { return describeSent(t, sys, pid) == n },
		5*time.Second, time.Millisecond)
	require.NoError(t, sys.Root.StopFuture(pid).Wait())
	close(sess.fail)
	for range n {
		select {
		case p := <-handed:
			require.NotNil(t, p.Done)
		case <-ctx.Done():
			t.Fatal("an unconfirmed publish went to the stopped sender")
		}
	}
	require.Empty(t, done, "nothing failed")
	require.NoError(t, sys.Root.StopFuture(probe).Wait())
	require.NoError(t, env.Wait(ctx))
}

func describeSent(t *testing.T, sys *actor.ActorSystem, pid *actor.PID) uint64 {
	res, err := sys.Root.RequestFuture(pid, &protocol.Describe{}, time.Second).Result()
	require.NoError(t, err)
	return res.(*protocol.Described).Node.Counters["published"]
}
