package sender_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/sender"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/test/kit/faketransport"
	"github.com/amqpactor/amqpactor/test/kit/statetest"
	"github.com/amqpactor/amqpactor/transport"
)

func publishBody(t *testing.T, sys *actor.ActorSystem, pid *actor.PID, body string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faketransport.Bound)
	defer cancel()
	done := make(chan error, 1)
	sys.Root.Send(pid, &protocol.Publish{Ctx: ctx, Address: address.Queue("q"), Message: amqp.NewMessage([]byte(body)), Done: done})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		t.Fatalf("publish %q never answered", body)
		return nil
	}
}

// A sender's link is attached, detached by the peer under a publish, and
// attached again after the backoff by the next incarnation, which sends
// the publish: the state changes say so, in order.
func TestLinkLifeStates(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	var seen statetest.Changes
	env.OnState = seen.On
	fs := faketransport.OpenSession(t)
	var sess transport.Session = fs

	spawned := make(chan *actor.PID, 1)
	ppid := sys.Root.Spawn(env.Props(func() actor.Actor {
		return actor.ReceiveFunc(func(c actor.Context) {
			if _, ok := c.Message().(*actor.Started); ok {
				spawned <- c.Spawn(sender.New(env, sender.Config{Address: address.Queue("q"), Session: sess}))
			}
		})
	}))
	pid := <-spawned

	require.NoError(t, publishBody(t, sys, pid, "one"))
	fs.Senders()[0].Detach("amqp:link:detach-forced", "test")
	require.NoError(t, publishBody(t, sys, pid, "two"), "sent again on the next link")

	ls := fs.Senders()
	require.Len(t, ls, 2, "one link per incarnation")
	require.Len(t, ls[1].Sent(), 1)
	require.Equal(t, "two", string(ls[1].Sent()[0].GetData()))
	require.Equal(t, []string{
		">detached", "detached>attaching", "attaching>attached",
		"attached>detached", "detached>restarting", // the link ended with a publish waiting
		"restarting>attaching", "attaching>attached", // the next incarnation, after the backoff
	}, seen.List())
	require.Equal(t, protocol.StateAttached, faketransport.Describe(t, sys, pid).Node.State)

	require.NoError(t, faketransport.Drain(t, sys, pid))
	require.NoError(t, sys.Root.PoisonFuture(ppid).Wait())
	require.Equal(t, []string{"attached>detached", "detached>stopped"}, seen.List()[7:])
}

// A sender drained while its attach is under way closes the link that
// attach brings, and says detached: no attach is under way any more.
func TestDrainedWhileAttachingShowsDetached(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	sess := &fakeSession{hold: true, release: make(chan struct{})}
	pid := sys.Root.Spawn(sender.New(env, sender.Config{Address: address.Queue("q"), Session: sess}))
	ctx, cancel := context.WithTimeout(context.Background(), faketransport.Bound)
	defer cancel()
	done := make(chan error, 1)
	sys.Root.Send(pid, &protocol.Publish{Ctx: ctx, Address: address.Queue("q"), Message: amqp.NewMessage([]byte("x")), Done: done})
	require.Eventually(t, func() bool { return sess.calls.Load() == 1 }, faketransport.Bound, faketransport.Bound/1000)
	require.NoError(t, faketransport.Drain(t, sys, pid))
	require.ErrorIs(t, <-done, protocol.ErrStopped)
	require.Equal(t, protocol.StateAttaching, faketransport.Describe(t, sys, pid).Node.State)
	close(sess.release)
	require.Eventually(t, func() bool {
		return faketransport.Describe(t, sys, pid).Node.State == protocol.StateDetached
	}, faketransport.Bound, faketransport.Bound/1000)
	require.NoError(t, sys.Root.PoisonFuture(pid).Wait())
}

// heldFirst attaches through its Gate and keeps the links it gave.
type heldFirst struct {
	faketransport.Gate
	links []*closingLink
	mu    sync.Mutex
}

type closingLink struct {
	fakeLink
	closed atomic.Bool
}

func (l *closingLink) Close(context.Context) error {
	l.closed.Store(true)
	return nil
}

func (s *heldFirst) NewSender(ctx context.Context, _ transport.SenderOptions) (transport.Sender, error) {
	if err := s.Pass(ctx); err != nil {
		return nil, err
	}
	l := &closingLink{}
	s.mu.Lock()
	s.links = append(s.links, l)
	s.mu.Unlock()
	return l, nil
}

func (s *heldFirst) NewReceiver(context.Context, transport.ReceiverOptions) (transport.Receiver, error) {
	return nil, errors.New("fake: no receivers")
}

func (s *heldFirst) Close(context.Context) error { return nil }

func (s *heldFirst) link(i int) *closingLink {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(s.links) {
		return nil
	}
	return s.links[i]
}

// spawnUnder runs a sender under a parent with the App's strategy.
func spawnUnder(t *testing.T, sys *actor.ActorSystem, env *actors.Env, c sender.Config) (parent, pid *actor.PID) {
	t.Helper()
	spawned := make(chan *actor.PID, 1)
	parent = sys.Root.Spawn(env.Props(func() actor.Actor {
		return actor.ReceiveFunc(func(ctx actor.Context) {
			if _, ok := ctx.Message().(*actor.Started); ok {
				spawned <- ctx.Spawn(sender.New(env, c))
			}
		})
	}))
	return parent, <-spawned
}

// An attach on a session since replaced answers after the next incarnation
// attached on the new one: its link is closed, and the sender stays
// attached with the one link it has (it used to say detached and attach a
// second link).
func TestLateAnswerFromReplacedSessionKeepsAttached(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	old := &heldFirst{Gate: faketransport.Gate{Release: make(chan struct{})}}
	parent, pid := spawnUnder(t, sys, env, sender.Config{Address: address.Queue("q"), Session: old})
	require.Eventually(t, func() bool { return old.Calls.Load() == 1 }, faketransport.Bound, faketransport.Bound/1000)

	next := &heldFirst{}
	sys.Root.Send(pid, &sender.SessionDown{Err: &amqp.ConnError{}})
	sys.Root.Send(pid, &sender.SessionUp{Session: next})
	sys.Root.Send(pid, &testhook.Crash{Reason: "test"})
	require.NoError(t, publishBody(t, sys, pid, "y"), "the next incarnation attached on the new session")
	require.Equal(t, protocol.StateAttached, faketransport.Describe(t, sys, pid).Node.State)

	close(old.Release)
	require.Eventually(t, func() bool { l := old.link(0); return l != nil && l.closed.Load() }, faketransport.Bound, faketransport.Bound/1000,
		"the late link is closed")
	require.Equal(t, protocol.StateAttached, faketransport.Describe(t, sys, pid).Node.State)
	require.EqualValues(t, 1, next.Calls.Load(), "no second link on the new session")
	require.NoError(t, faketransport.Drain(t, sys, pid))
	require.NoError(t, sys.Root.PoisonFuture(parent).Wait())
}

// records keeps the messages of the log records that name err.
type records struct {
	mu   sync.Mutex
	seen []string
	err  error
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" && a.Value.String() == r.err.Error() {
			r.mu.Lock()
			r.seen = append(r.seen, rec.Message)
			r.mu.Unlock()
		}
		return true
	})
	return nil
}

func (r *records) any() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen) > 0
}

// The attach of an incarnation that panicked fails after the next one
// attached on the same session: the link attached stands, and the sender
// says attached (it used to say restarting, and arm a retry).
func TestLateAttachFailureKeepsAttached(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	stale := errors.New("the dead incarnation's attach failed")
	logged := &records{err: stale}
	env.Log = slog.New(logged)
	sess := &heldFirst{Gate: faketransport.Gate{Release: make(chan struct{}), First: stale}}
	parent, pid := spawnUnder(t, sys, env, sender.Config{Address: address.Queue("q"), Session: sess})
	require.Eventually(t, func() bool { return sess.Calls.Load() == 1 }, faketransport.Bound, faketransport.Bound/1000)
	sys.Root.Send(pid, &testhook.Crash{Reason: "test"})
	require.NoError(t, publishBody(t, sys, pid, "y"), "the next incarnation attached")

	close(sess.Release)
	require.Eventually(t, logged.any, faketransport.Bound, faketransport.Bound/1000, "the late failure reached the sender")
	require.Equal(t, protocol.StateAttached, faketransport.Describe(t, sys, pid).Node.State)
	require.NoError(t, faketransport.Drain(t, sys, pid))
	require.NoError(t, sys.Root.PoisonFuture(parent).Wait())
}
