package session_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/session"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/test/kit/faketransport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

const tick = time.Millisecond

// rig is one actor of the package on a fake connection.
type rig struct {
	t    *testing.T
	sys  *actor.ActorSystem
	env  *actors.Env
	c    *faketransport.Connector
	conn *faketransport.Conn
	pid  *actor.PID
}

func newRig(t *testing.T, tune func(*actors.Env)) *rig {
	sys, env := faketransport.NewSystem(t)
	if tune != nil {
		tune(env)
	}
	c := &faketransport.Connector{}
	conn, err := c.Connect(context.Background())
	require.NoError(t, err)
	return &rig{t: t, sys: sys, env: env, c: c, conn: conn.(*faketransport.Conn)}
}

// spawn starts props, tells it the connection is up, and drains and stops
// it at the end of the test.
func (r *rig) spawn(props *actor.Props) *actor.PID {
	r.pid = r.sys.Root.Spawn(props)
	r.t.Cleanup(func() {
		_ = faketransport.Drain(r.t, r.sys, r.pid)
		_ = r.sys.Root.PoisonFuture(r.pid).Wait()
	})
	r.sys.Root.Send(r.pid, &protocol.ConnUp{Conn: r.conn})
	return r.pid
}

func (r *rig) node() *protocol.Node { return faketransport.Describe(r.t, r.sys, r.pid).Node }

// publish publishes body to a through the publisher and waits for its answer.
func (r *rig) publish(a address.Address, body string) error {
	r.t.Helper()
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), faketransport.Bound)
	defer cancel()
	r.sys.Root.Send(r.pid, &protocol.Publish{Ctx: ctx, Address: a, Message: amqp.NewMessage([]byte(body)), Done: done})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		r.t.Fatalf("the publish of %q was never answered", body)
		return nil
	}
}

// sent maps each address to the bodies sent to it, on every session.
func (r *rig) sent() map[string][]string {
	out := map[string][]string{}
	for _, s := range r.conn.Sessions() {
		for _, l := range s.Senders() {
			for _, m := range l.Sent() {
				out[l.Address()] = append(out[l.Address()], string(m.GetData()))
			}
		}
	}
	return out
}

func TestPublisherRoutesEachAddressToItsOwnSender(t *testing.T) {
	r := newRig(t, nil)
	r.spawn(session.NewPublisher(r.env, session.NewSenders()))
	for i, a := range []string{"a", "b", "a", "c", "a"} {
		require.NoError(t, r.publish(address.Queue(a), fmt.Sprint(a, i)))
	}
	require.Equal(t, map[string][]string{"a": {"a0", "a2", "a4"}, "b": {"b1"}, "c": {"c3"}}, r.sent())
	ss := r.conn.Sessions()
	require.Len(t, ss, 1, "every sender on the publisher's one session")
	require.Len(t, ss[0].Senders(), 3, "one link per address")
	n := r.node()
	require.Equal(t, protocol.StateAttached, n.State)
	require.EqualValues(t, 3, n.Counters["senders"])
}

func TestPublisherBoundRetiresTheLeastRecentlyUsedSender(t *testing.T) {
	r := newRig(t, func(e *actors.Env) { e.MaxSenders = 2 })
	r.spawn(session.NewPublisher(r.env, session.NewSenders()))
	require.NoError(t, r.publish(address.Queue("a"), "a0"))
	require.NoError(t, r.publish(address.Queue("b"), "b0"))
	require.NoError(t, r.publish(address.Queue("b"), "b1"))
	// c needs a sender: a, the least recently used, retires first.
	require.NoError(t, r.publish(address.Queue("c"), "c0"))
	require.Equal(t, map[string][]string{"a": {"a0"}, "b": {"b0", "b1"}, "c": {"c0"}}, r.sent())
	links := map[string]*faketransport.Sender{}
	for _, l := range r.conn.Sessions()[0].Senders() {
		links[l.Address()] = l
	}
	require.Eventually(t, func() bool { return links["a"].Closed() }, faketransport.Bound, tick, "the retired sender detached")
	require.False(t, links["b"].Closed(), "the recently used sender kept its link")
	n := r.node()
	require.EqualValues(t, 1, n.Counters["retired"])
	require.EqualValues(t, 2, n.Counters["senders"], "never more than the bound")
	// a again: a new link, b retires.
	require.NoError(t, r.publish(address.Queue("a"), "a1"))
	require.Len(t, r.conn.Sessions()[0].Senders(), 4)
	require.Equal(t, []string{"a0", "a1"}, r.sent()["a"])
}

func TestPublisherRetiresAnIdleSender(t *testing.T) {
	r := newRig(t, func(e *actors.Env) { e.SenderIdle = 20 * time.Millisecond })
	r.spawn(session.NewPublisher(r.env, session.NewSenders()))
	require.NoError(t, r.publish(address.Queue("a"), "a0"))
	l := r.conn.Sessions()[0].Senders()[0]
	require.Eventually(t, func() bool { return l.Closed() && r.node().Counters["retired"] == 1 }, faketransport.Bound, tick,
		"an idle sender retires and detaches")
	require.Zero(t, r.node().Counters["senders"])
	require.NoError(t, r.publish(address.Queue("a"), "a1"), "a retired address gets a new sender")
	require.Equal(t, []string{"a0", "a1"}, r.sent()["a"])
}

// The broker ends the publisher's session: the next publish fails on the
// dead link, the sender reports the lost session, the publisher begins a
// new one, and the publish goes out there. Nothing is lost or sent twice.
func TestPublisherReplacesAnEndedSession(t *testing.T) {
	r := newRig(t, nil)
	r.spawn(session.NewPublisher(r.env, session.NewSenders()))
	require.NoError(t, r.publish(address.Queue("a"), "a0"))
	require.NoError(t, r.publish(address.Queue("b"), "b0"))
	first := r.conn.Sessions()[0]
	first.End("amqp:internal-error", "session gone")
	require.NoError(t, r.publish(address.Queue("a"), "a1"))
	require.NoError(t, r.publish(address.Queue("b"), "b1"))
	require.Equal(t, map[string][]string{"a": {"a0", "a1"}, "b": {"b0", "b1"}}, r.sent())
	ss := r.conn.Sessions()
	require.Len(t, ss, 2, "one new session")
	require.Len(t, ss[1].Senders(), 2, "both senders re-attached on it")
	n := r.node()
	require.Equal(t, protocol.StateAttached, n.State)
	require.Contains(t, n.LastError, "session gone")
}

// requestOnce sends one request to the requests actor and returns its answer.
func (r *rig) request(key string) protocol.Reply {
	r.t.Helper()
	reply := make(chan protocol.Reply, 1)
	r.sys.Root.Send(r.pid, &protocol.Request{Key: key, Ctx: context.Background(), Address: address.Queue("rpc"),
		Message: &messages.Message{Body: []byte(key)}, Reply: reply})
	select {
	case rep := <-reply:
		return rep
	case <-time.After(faketransport.Bound):
		r.t.Fatalf("request %s never answered", key)
		return protocol.Reply{}
	}
}

func TestRequestsAttachOnFirstRequestAndReplaceAnEndedSession(t *testing.T) {
	r := newRig(t, nil)
	book := session.NewReplies()
	r.spawn(session.NewRequests(r.env, book))
	require.Empty(t, r.conn.Sessions(), "nothing attached before the first request")
	rep := r.request("k1")
	require.NoError(t, rep.Err)
	require.Equal(t, "fake.reply", *rep.Send.Properties.ReplyTo)
	ss := r.conn.Sessions()
	require.Len(t, ss, 1)
	link := ss[0].Receivers()[0]
	require.True(t, link.Opts.Dynamic)

	// Another caller registers straight in the book while the link lives.
	waiter := make(chan protocol.Reply, 1)
	to, ok := book.Register(protocol.CorrelationKey("k2"), waiter)
	require.True(t, ok)
	require.Equal(t, "fake.reply", to)
	var corr any = "k2"
	require.True(t, link.Deliver(&amqp.Message{Properties: &amqp.MessageProperties{CorrelationID: corr}, Data: [][]byte{[]byte("re")}}))
	select {
	case got := <-waiter:
		require.NoError(t, got.Err)
		require.Equal(t, "re", string(got.Message.Body))
	case <-time.After(faketransport.Bound):
		t.Fatal("the reply never reached its caller")
	}

	// The broker ends the session: a waiting caller learns why, the book
	// closes, and the next request attaches on a new session.
	_, ok = book.Register(protocol.CorrelationKey("k3"), waiter)
	require.True(t, ok)
	ss[0].End("amqp:internal-error", "session gone")
	select {
	case got := <-waiter:
		var se *amqp.SessionError
		require.ErrorAs(t, got.Err, &se)
		require.ErrorContains(t, got.Err, "session gone")
	case <-time.After(faketransport.Bound):
		t.Fatal("a waiting request never learnt that its reply link ended")
	}
	require.Eventually(t, func() bool { return r.node().State == protocol.StateDetached }, faketransport.Bound, tick)
	_, ok = book.Register("k4", waiter)
	require.False(t, ok, "the book is closed while no reply link is attached")
	require.NoError(t, r.request("k5").Err)
	require.Len(t, r.conn.Sessions(), 2, "a new session for the new reply link")
	require.Eventually(t, ss[0].Closed, faketransport.Bound, tick, "the dead session is closed")
	n := r.node()
	require.Equal(t, protocol.StateAttached, n.State)
	require.EqualValues(t, 1, n.Counters["answered"])
}

// acceptingSpec is subscription "s" on queue q, credit 8, on partitions,
// whose handler h (nil: one that does nothing) is always accepted.
func acceptingSpec(partitions int, h func(context.Context, *messages.Message) error) *protocol.SubscriptionSpec {
	if h == nil {
		h = func(context.Context, *messages.Message) error { return nil }
	}
	return &protocol.SubscriptionSpec{Name: "s", Address: address.Queue("q"), Credit: 8, Partitions: partitions,
		Handler: h,
		Outcome: func(context.Context, error, *messages.Message) messages.Outcome {
			return messages.Outcome{Kind: messages.Accepted}
		}}
}

// bodies counts the messages its handler saw, by body.
type bodies struct {
	mu   sync.Mutex
	seen map[string]int
}

func (b *bodies) handle(_ context.Context, m *messages.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == nil {
		b.seen = map[string]int{}
	}
	b.seen[string(m.Body)]++
	return nil
}

// handled is the condition that body was handled at least once.
func (b *bodies) handled(body string) func() bool {
	return func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.seen[body] > 0 }
}

// counts is a copy of what was handled.
func (b *bodies) counts() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.seen)
}

// attached waits for a subscription's first attach to be answered, and
// requires it to have succeeded.
func attached(t *testing.T, started <-chan error) {
	t.Helper()
	select {
	case err := <-started:
		require.NoError(t, err)
	case <-time.After(faketransport.Bound):
		t.Fatal("the first attach was never answered")
	}
}

// underParent spawns the subscription of spec as the child of a parent that
// hands on the Reconnects it is asked for, tells it the connection is up,
// and stops both at the end of the test; it returns the channel of the
// first attach's answer.
func (r *rig) underParent(spec *protocol.SubscriptionSpec, reconnects chan<- *protocol.Reconnect) <-chan error {
	started := make(chan error, 1)
	children := make(chan *actor.PID, 1)
	pp := r.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &parent{props: session.NewSubscription(r.env, spec, started), child: children, reconnects: reconnects}
	}))
	r.t.Cleanup(func() { _ = r.sys.Root.PoisonFuture(pp).Wait() })
	r.pid = <-children
	r.t.Cleanup(func() { _ = faketransport.Drain(r.t, r.sys, r.pid) })
	r.sys.Root.Send(r.pid, &protocol.ConnUp{Conn: r.conn})
	return started
}

func TestSubscriptionReplacesAnEndedSessionWithoutLoss(t *testing.T) {
	r := newRig(t, nil)
	var got bodies
	spec := acceptingSpec(1, got.handle)
	started := make(chan error, 1)
	r.spawn(session.NewSubscription(r.env, spec, started))
	attached(t, started)
	first := r.conn.Sessions()[0]
	l1 := first.Receivers()[0]
	require.Equal(t, "q", l1.Address())
	require.True(t, l1.Deliver(amqp.NewMessage([]byte("m1"))))
	require.Eventually(t, got.handled("m1"), faketransport.Bound, tick)
	require.Eventually(t, func() bool { return len(l1.Settlements()) == 1 }, faketransport.Bound, tick)
	require.Equal(t, messages.Accepted, l1.Settlements()[0].Outcome.Kind)

	first.End("amqp:internal-error", "session gone")
	require.Eventually(t, func() bool {
		ss := r.conn.Sessions()
		return len(ss) == 2 && len(ss[1].Receivers()) == 1 && r.node().State == protocol.StateAttached
	}, faketransport.Bound, tick, "a new session and receiver")
	l2 := r.conn.Sessions()[1].Receivers()[0]
	require.True(t, l2.Deliver(amqp.NewMessage([]byte("m2"))))
	require.Eventually(t, got.handled("m2"), faketransport.Bound, tick)
	require.Eventually(t, func() bool { return len(l2.Settlements()) == 1 }, faketransport.Bound, tick)
	n := r.node()
	require.Equal(t, 1, n.Restarts)
	require.Contains(t, n.LastError, "session gone")
	require.Equal(t, map[string]int{"m1": 1, "m2": 1}, got.counts())
}

// parent spawns props as its child and hands every Reconnect it is asked
// for to reconnects.
type parent struct {
	props      *actor.Props
	child      chan<- *actor.PID
	reconnects chan<- *protocol.Reconnect
}

func (p *parent) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.child <- ctx.Spawn(p.props)
	case *protocol.Reconnect:
		p.reconnects <- m
	}
}

// A receiver whose session ended re-attaches on a new one; when that one
// ends too before the attach (the attach fails with the session's error),
// the subscription stops replacing sessions and asks the connection to
// reconnect.
func TestSubscriptionEscalatesWhenNewSessionsEndToo(t *testing.T) {
	r := newRig(t, nil)
	r.c.OnSession = func(s *faketransport.Session) {
		if len(r.conn.Sessions()) > 1 { // every session after the first is born ended
			s.End("amqp:internal-error", "ended at once")
		}
	}
	spec := acceptingSpec(1, nil)
	reconnects := make(chan *protocol.Reconnect, 4)
	started := r.underParent(spec, reconnects)
	attached(t, started)
	r.conn.Sessions()[0].End("amqp:internal-error", "session gone")
	select {
	case m := <-reconnects:
		var se *amqp.SessionError
		require.ErrorAs(t, m.Err, &se, "the attach on the new session failed with its end")
		require.Equal(t, "ended at once", se.RemoteErr.Description)
	case <-time.After(faketransport.Bound):
		t.Fatal("the subscription never asked for a reconnect")
	}
	ss := r.conn.Sessions()
	// The retries go on after the escalation (the connection may decline it).
	require.GreaterOrEqual(t, len(ss), 2, "one replacement session, then the escalation")
	require.Equal(t, 1, ss[1].Attaches(), "the receiver retried its attach on a session that had ended")
	require.Equal(t, protocol.StateRestarting, r.node().State)
}

// A broker that ends every new session at once (RabbitMQ 4 ends the session
// when it refuses an attach): the publisher replaces the first lost session
// at once, and the next ones after a backoff. It used to replace them in a
// busy loop, thousands of sessions a second.
func TestPublisherBacksOffWhenNewSessionsEndAtOnce(t *testing.T) {
	r := newRig(t, func(e *actors.Env) {
		e.Backoff = actors.Backoff{Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond}
	})
	var recovered atomic.Bool
	r.c.OnSession = func(s *faketransport.Session) {
		if len(r.conn.Sessions()) > 2 && !recovered.Load() { // the second, first replacement, lives
			s.End("amqp:internal-error", "ended at once")
		}
	}
	r.spawn(session.NewPublisher(r.env, session.NewSenders()))
	require.NoError(t, r.publish(address.Queue("a"), "a0"))
	r.conn.Sessions()[0].End("amqp:internal-error", "gone")
	require.NoError(t, r.publish(address.Queue("a"), "a1"), "the first loss is replaced at once")
	require.Len(t, r.conn.Sessions(), 2)

	r.conn.Sessions()[1].End("amqp:internal-error", "gone again")
	ctx, cancel := context.WithTimeout(context.Background(), faketransport.Bound)
	defer cancel()
	done := make(chan error, 1)
	r.sys.Root.Send(r.pid, &protocol.Publish{Ctx: ctx, Address: address.Queue("a"), Message: amqp.NewMessage([]byte("a2")), Done: done})
	require.Eventually(t, func() bool { return len(r.conn.Sessions()) >= 4 }, faketransport.Bound, tick, "sessions are replaced")
	// At least 25 ms between two replacements: at most a dozen in 300 ms.
	require.Never(t, func() bool { return len(r.conn.Sessions()) > 20 }, 300*time.Millisecond, tick,
		"sessions replaced in a busy loop")
	recovered.Store(true)
	select {
	case err := <-done:
		// An attach on a session the broker ended with an error is the
		// broker's answer: the publish waiting for it may hear it.
		if err != nil {
			require.ErrorContains(t, err, "ended at once")
		}
	case <-ctx.Done():
		t.Fatal("the publish was never answered")
	}
	// The sender answers the refusal for one backoff, then tries again.
	require.Eventually(t, func() bool { return r.publish(address.Queue("a"), "a3") == nil }, faketransport.Bound, 10*time.Millisecond,
		"sessions live again")
	require.Subset(t, r.sent()["a"], []string{"a0", "a1", "a3"})
}

// A subscription that panics ends its session, and its next incarnation
// opens a new one and attaches a receiver at once, on the same connection,
// without waiting for a ConnUp.
func TestSubscriptionRestartReattachesAtOnce(t *testing.T) {
	r := newRig(t, nil)
	var got bodies
	spec := acceptingSpec(2, got.handle)
	started := make(chan error, 1)
	pid := r.spawn(session.NewSubscription(r.env, spec, started))
	attached(t, started)
	first := r.conn.Sessions()[0]
	require.True(t, first.Receivers()[0].Deliver(amqp.NewMessage([]byte("m1"))))
	require.Eventually(t, got.handled("m1"), faketransport.Bound, tick)

	r.sys.Root.Send(pid, &testhook.Crash{Reason: "test"})
	require.Eventually(t, func() bool {
		ss := r.conn.Sessions()
		return len(ss) == 2 && len(ss[1].Receivers()) == 1 && r.node().State == protocol.StateAttached
	}, faketransport.Bound, tick, "a new session and receiver, with no ConnUp")
	require.Eventually(t, first.Closed, faketransport.Bound, tick, "the dead incarnation's session is ended")
	require.True(t, r.conn.Sessions()[1].Receivers()[0].Deliver(amqp.NewMessage([]byte("m2"))))
	require.Eventually(t, got.handled("m2"), faketransport.Bound, tick)
	n := r.node()
	require.EqualValues(t, 1, n.Counters["panics"])
	require.Equal(t, 1, n.Restarts)
}

// A requests actor that panics fails the callers waiting in its book at
// once (their reply link is gone) rather than letting them wait out their
// deadline, ends its old session, and its next incarnation attaches a new
// reply link on the same connection with no ConnUp.
func TestRequestsRestartFailsWaitersAndReattachesAtOnce(t *testing.T) {
	r := newRig(t, nil)
	book := session.NewReplies()
	pid := r.spawn(session.NewRequests(r.env, book))
	require.NoError(t, r.request("k1").Err)
	first := r.conn.Sessions()[0]
	waiter := make(chan protocol.Reply, 1)
	_, ok := book.Register(protocol.CorrelationKey("k2"), waiter)
	require.True(t, ok)

	r.sys.Root.Send(pid, &testhook.Crash{Reason: "test"})
	select {
	case got := <-waiter:
		require.ErrorIs(t, got.Err, session.ErrRestarted)
	case <-time.After(faketransport.Bound):
		t.Fatal("a waiting caller was not told of the restart")
	}
	require.Eventually(t, first.Closed, faketransport.Bound, tick, "the dead incarnation's session is ended")
	rep := r.request("k3")
	require.NoError(t, rep.Err)
	require.Len(t, r.conn.Sessions(), 2, "a new reply link, with no ConnUp")
	n := r.node()
	require.Equal(t, protocol.StateAttached, n.State)
	require.EqualValues(t, 1, n.Counters["panics"])
	require.Equal(t, 1, n.Restarts)
}
