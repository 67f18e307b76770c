// Package sender owns one sender link: to one address (a dedicated sender),
// or to the anonymous terminus (Config.Address zero), where each publish
// names its own address and a node the broker cannot route to fails that
// publish only. It attaches on first publish, reuses the link, and pipelines
// transfers: a writer goroutine sends without waiting for outcomes, a
// confirmer goroutine waits for them in order and answers each publisher. A
// publish still unsent when its link ends is sent again on the next link,
// and so is one already written whose outcome the dead link never brought
// (at-least-once: the copy keeps its message-id), unless its context has
// ended; the confirmer hands those back in send order, and they go out
// before anything that waited for the link.
//
// # Retirement
//
// A sender with Config.Idle set retires once nothing was published through
// it for that long (checked every Idle/4, so within 1.25 × Idle), and when
// its parent sends Retire. Retiring, it first tells its parent (Retiring),
// then closes its lane, lets the writer and the confirmer finish what was
// handed to them (outcomes awaited, bounded by the close timeout), detaches
// and tells its parent again (Retired); the parent then stops it. Every
// publish that reaches it after it began to retire, or that its link gave
// back, goes to its parent, which routes it anew: a publish racing a
// retirement is written exactly once (or, when the link dies under it,
// sent again like any other).
//
// # Restarts
//
// A sender that panics is restarted by its parent's strategy, and the dying
// incarnation lets go of everything it owns on Restarting, as a retirement
// does: it closes its lane, hands the publishes waiting for a link back to
// its parent (which routes them again, to the next incarnation), and lets
// the writer and the confirmer finish what was handed to them on the old
// link, which closes after them. Whatever they give back reaches the next
// incarnation, which sends it again. Restart, rather than stop and rebuild
// from the spec: the PID, the Lane and the parent's routing stay valid, and
// no publish is answered with an error. The next incarnation is a new
// struct (built by the props' producer) that starts from the session its
// predecessor had; link generations come from one counter per App (Env.Gen), so
// no report of a dead incarnation's goroutines is taken for the new link's.
// Node.Restarts counts the panics too ("panics" counter).
//
// # Stops
//
// A sender stopped while its publisher lives (its supervisor gave up on it,
// or the publisher is restarting) fails nothing: it hands what waits, and
// what is parked on its Lane, to the publisher, which routes it to a new
// sender, and lets its writer and confirmer finish on the old link, handing
// the publisher what that link never confirmed. Only a drained sender, or one
// whose publisher has stopped for good (Config.ParentGone), fails what waits
// with ErrStopped.
//
// # Link states
//
// The link's life is one linkState (state.go), which only linkState.on
// moves: detached, attaching, attached; refused (shown as detached) after
// the broker refused an attach; backoff (shown as restarting) while it
// waits to attach again; restarting, retiring, stopped. Its String is the
// node state the tree and the StateChanges show.
package sender

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/workq"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// SessionUp gives a sender the session to attach on; SessionDown takes it
// away. SessionLost tells the publisher that its session ended under a
// sender: RabbitMQ 4 ends the whole session when it refuses one attach, so
// every sender on it needs a new one.
type (
	SessionUp   struct{ Session transport.Session }
	SessionDown struct{ Err error }
	SessionLost struct {
		Session transport.Session
		Err     error
	}
)

// Retire asks a sender to retire (see the package documentation); its
// parent sends it to make room for another address. Retiring tells the
// parent that the sender PID has begun to retire (its lane is closed from
// now on); Retired that it has let go of its link and may be stopped.
type (
	Retire   struct{}
	Retiring struct{ PID *actor.PID }
	Retired  struct{ PID *actor.PID }
)

// StateRetiring is the state of a sender that is retiring.
const StateRetiring = "retiring"

// Config says what a sender sends to.
type Config struct {
	// Address is the target; the zero Address is the anonymous terminus,
	// which needs a session whose connection offers the anonymous relay.
	Address address.Address
	// Session is the session to attach on; nil waits for SessionUp.
	Session transport.Session
	// Lane is the sender's Lane, kept by whoever spawns it; nil gives it
	// one nobody else uses.
	Lane *Lane
	// Idle, when > 0, retires the sender after that long without a publish.
	Idle time.Duration
	// Parent is the node of the publisher that spawns the sender: the
	// sender's own node (in its state changes) is its child.
	Parent actors.Node
	// ParentGone, when set, is closed once the publisher the sender hands
	// its publishes to has stopped for good (a restart does not close it).
	// A sender stopped before that (by its supervisor, or by a restarting
	// parent) hands what waits to the publisher, which routes it again, and
	// finishes what its writer has on the old link, as on its own restart;
	// one stopped after it, or drained, fails them ErrStopped, since nobody
	// would route them.
	ParentGone <-chan struct{}
	// HandTo, when set, is where a stopping sender's publishes go instead
	// of the parent (which may be stopping too).
	HandTo *actor.PID
}

// Wake tells a sender that its Lane has publishes parked for it (Park).
type Wake struct{}

func sessionEnded(err error) bool {
	var se *amqp.SessionError
	return errors.As(err, &se)
}

// settledLink is how long a link stays attached before its end no longer
// counts with the failures before it: a link the broker detaches right after
// every attach re-attaches after a backoff that grows, not after the first
// one each time.
const settledLink = time.Second

// New returns the props of a sender.
func New(env *actors.Env, c Config) *actor.Props {
	if c.Lane == nil {
		c.Lane = NewLane()
	}
	k := &kept{sess: c.Session}
	return env.Props(func() actor.Actor {
		// Every incarnation starts from here: a restart builds a new
		// struct, which takes the session its predecessor had last.
		s := &sender{env: env, addr: c.Address, sess: k.sess, lane: c.Lane, idle: c.Idle, parent: c.Parent, kept: k,
			parentGone: c.ParentGone, handTo: c.HandTo}
		if k.drained {
			// Its predecessor was drained: this one never attaches and
			// answers publishes ErrStopped.
			s.drain, s.sess = &protocol.Drain{}, nil
		}
		if d := k.detached; d != nil {
			s.restarts, s.attempt, s.lastErr, s.st = d.restarts, d.attempt, d.err, stBackoff
			s.pending, s.resend = d.pending, d.resend
		}
		return s
	})
}

// kept is what one sender's incarnations share: the session the last one
// had, and how many panicked. Only the actor's mailbox run touches sess
// (Restarting, then the producer of the next incarnation).
type kept struct {
	sess    transport.Session
	drained bool
	panics  atomic.Uint64
	// detached is set by an incarnation that failed because its link
	// ended with publishes waiting, for the next to re-attach after a
	// backoff.
	detached *detachedLink
}

// detachedLink is what an incarnation whose link ended hands the next.
type detachedLink struct {
	err               error
	restarts, attempt int
	// pending and resend wait for the next link, which is this actor's:
	// they stay with it rather than go round through the parent.
	pending, resend []*protocol.Publish
}

// Lane takes publishes past the sender's mailbox. While the sender has a
// link attached, Offer puts a Publish straight on the queue of the link's
// writer: the mailbox hop (a lock, a wake-up of an actor and another queue)
// was the largest cost of a publish after the garbage collector. The actor
// still owns the link: it opens the lane when the link is attached, after
// what waited for it, and closes it before it takes back what the writer
// did not send, so a publish on the lane is either written, handed back to
// the actor, or refused (Offer reports false and the caller sends it to the
// actor as before).
//
// While the link is not attached, the parent parks publishes on the lane
// (Park) and wakes the sender (Wake), which takes them. Parked publishes are
// never lost with the sender: a sender that stops takes them with what waits,
// and once it is gone its parent takes what is left (Shut) and routes it anew,
// where a publish sent to its mailbox would have been dropped with it.
type Lane struct {
	q    atomic.Pointer[workq.Q[job]]
	used atomic.Uint64

	// mu guards parked and shut, which the parent's and the sender's
	// mailbox runs share: whoever takes a parked publish owns it.
	mu     sync.Mutex
	parked []*protocol.Publish
	shut   bool
}

// NewLane returns a closed lane.
func NewLane() *Lane { return new(Lane) }

// Offer queues p on the attached link's writer, or reports false.
func (l *Lane) Offer(p *protocol.Publish) bool {
	q := l.q.Load()
	if q != nil && q.Push(job{p: p}) {
		l.used.Add(1)
		return true
	}
	return false
}

// Used counts the publishes Offer took: it changes while the lane is used.
func (l *Lane) Used() uint64 { return l.used.Load() }

// Park keeps p for the sender, which takes it when woken. wake reports that
// the sender must be sent a Wake (nothing was parked before); ok is false
// once the lane is shut (the sender is gone).
func (l *Lane) Park(p *protocol.Publish) (ok, wake bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shut {
		return false, false
	}
	l.parked = append(l.parked, p)
	return true, len(l.parked) == 1
}

// Shut closes the lane for good and returns what was parked on it: its
// sender has stopped.
func (l *Lane) Shut() []*protocol.Publish {
	l.q.Store(nil)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shut = true
	ps := l.parked
	l.parked = nil
	return ps
}

// takeParked returns what is parked, in order, for the sender.
func (l *Lane) takeParked() []*protocol.Publish {
	l.mu.Lock()
	defer l.mu.Unlock()
	ps := l.parked
	l.parked = nil
	return ps
}

type (
	attachResult struct {
		sess transport.Session // the session it was tried on
		link transport.Sender
		err  error
	}
	linkEnded struct {
		link   uint64
		err    error
		unsent []*protocol.Publish
		// written: unsent were written on the link but never confirmed
		// (from the confirmer); they go before everything else.
		written bool
	}
	retry    struct{}
	idleTick struct{}
	// job is what the writer and confirmer see: a publish, or a drain
	// marker that follows every earlier publish through both goroutines.
	job struct {
		p       *protocol.Publish
		receipt transport.Receipt
		drain   *protocol.Drain
	}
)

type sender struct {
	env        *actors.Env
	addr       address.Address
	parent     actors.Node     // the publisher's node
	parentGone <-chan struct{} // see Config.ParentGone; only received from
	handTo     *actor.PID      // see Config.HandTo
	sess       transport.Session
	lane       *Lane

	link     transport.Sender
	gen      uint64
	writeQ   *workq.Q[job]
	pending  []*protocol.Publish // waiting for a link
	resend   []*protocol.Publish // written on a dead link, unconfirmed: first on the next
	st       linkState
	lastErr  error
	restarts int
	attempt  int
	timer    *time.Timer
	drain    *protocol.Drain
	// attaching is the session an attach is in flight on, if any: its
	// answer is still to come. refusal is the broker's last refusal,
	// answered to publishes until refusedUntil.
	attaching    transport.Session
	refusal      error
	refusedUntil time.Time
	// attachedAt is when the current (or last) link attached.
	attachedAt time.Time
	// confirmed is closed when the confirmer of the current link returns.
	confirmerDone chan struct{}
	reports       *reports // where the current link's writer and confirmer hand back

	// Retirement: idle is the idle time (0: never); lastMark and
	// lastActive the activity seen at the last tick, and when it changed.
	idle       time.Duration
	idleTimer  *time.Timer
	lastMark   uint64
	lastActive time.Time

	kept *kept

	published, confirmed, failed, resent atomic.Uint64
}

// name is the sender's name in the tree.
func (s *sender) name() string {
	if s.addr.IsZero() {
		return "sender:(anonymous)"
	}
	return "sender:" + s.addr.Name()
}

// set moves the sender's state on ev (linkState.on) and reports a change
// of its public name (see actors.Env.SetState). An illegal transition is a
// bug of this file: it is logged at Error and the state kept, since a panic
// would restart the sender (re-sending what its link had) for bookkeeping.
func (s *sender) set(ev linkEvent, err error) bool {
	to, ok := s.st.on(ev)
	if !ok {
		s.env.Log.Error("amqpactor: sender: illegal state transition", "address", s.label(), "state", s.st.String(), "event", ev.String())
		return false
	}
	from := s.st.String()
	s.st = to
	s.env.SetState(&from, s.parent.Child(s.name(), "sender", s.label()), to.String(), err)
	return true
}

// hadLink reports whether this incarnation had a link: link generations
// are never zero.
func (s *sender) hadLink() bool { return s.gen != 0 }

// label names the sender's target in logs.
func (s *sender) label() string {
	if s.addr.IsZero() {
		return "(anonymous)"
	}
	return s.addr.String()
}

// waiting counts the publishes that wait for a link.
func (s *sender) waiting() int { return len(s.pending) + len(s.resend) }

// failWaiting answers every publish that waits for a link with err.
func (s *sender) failWaiting(err error) {
	s.pending = append(s.pending, s.lane.takeParked()...)
	for _, p := range s.resend {
		p.Answer(err)
	}
	for _, p := range s.pending {
		p.Answer(err)
	}
	s.resend, s.pending = nil, nil
}

// prune answers the waiting publishes whose context has ended: their
// callers have returned already, and nothing of them was confirmed.
func (s *sender) prune() {
	keep := func(ps []*protocol.Publish) []*protocol.Publish {
		out := ps[:0]
		for _, p := range ps {
			if err := p.Ctx.Err(); err != nil {
				p.Answer(err)
				continue
			}
			out = append(out, p)
		}
		clear(ps[len(out):])
		return out
	}
	s.resend, s.pending = keep(s.resend), keep(s.pending)
}

func (s *sender) Receive(ctx actor.Context) {
	if s.st == stRetiring && s.whileRetiring(ctx) {
		return
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		switch d := s.kept.detached; {
		case d != nil:
			// Restarted because its link ended: re-attach after a backoff
			// (the publishes it handed back come in meanwhile and wait).
			// It was built in stBackoff, which its predecessor reported.
			s.kept.detached = nil
			s.timer = s.env.After(s.env.Backoff.Delay(s.attempt), ctx.Self(), &retry{})
		case s.sess != nil:
			s.set(evStart, nil)
			s.attach(ctx)
		default:
			s.set(evStart, nil)
		}
		if s.idle > 0 {
			s.lastActive = time.Now()
			s.idleTimer = s.env.After(s.tick(), ctx.Self(), &idleTick{})
		}
	case *idleTick:
		s.onIdleTick(ctx)
	case *Retire:
		if s.drain == nil {
			s.retire(ctx)
		}
	case *SessionUp:
		s.sess = m.Session
		// Only a sender with work re-attaches: on RabbitMQ 4 a refused
		// attach ends the whole session, so a sender for a missing node
		// must not try again on every new session.
		if s.link == nil && s.st != stAttaching && (s.waiting() > 0 || s.hadLink()) {
			s.attach(ctx)
		}
	case *SessionDown:
		s.sess = nil
		if s.timer != nil {
			// A retry on a session that is gone is pointless; the next
			// SessionUp attaches if there is work.
			s.timer.Stop()
			s.timer = nil
		}
		s.endLink(ctx, m.Err, nil, false)
	case *protocol.Publish:
		s.onPublish(ctx, m)
	case *Wake:
		for _, p := range s.lane.takeParked() {
			s.onPublish(ctx, p)
		}
	case *attachResult:
		s.onAttach(ctx, m)
	case *linkEnded:
		switch {
		case m.link == s.gen && s.link != nil:
			s.endLink(ctx, m.err, m.unsent, m.written)
		case s.link != nil:
			// The writer of an older link gave these back after a new
			// link was attached: pending is not read again until the
			// next attach, so they go on the new link now.
			for _, p := range m.unsent {
				s.writeQ.Push(job{p: p})
			}
		case s.drain != nil:
			// Stopping: no link will come for them.
			for _, p := range m.unsent {
				p.Answer(protocol.ErrStopped)
			}
		default:
			s.keep(m.unsent, m.written)
			if s.waiting() > 0 && s.sess != nil && s.st != stAttaching && s.timer == nil {
				s.attach(ctx)
			}
		}
	case *retry:
		s.timer = nil
		s.prune()
		if s.link == nil && s.sess != nil && s.waiting() > 0 {
			s.attach(ctx)
		}
	case *protocol.Drain:
		s.onDrain(m)
	case *protocol.Describe:
		ctx.Respond(s.describe(ctx))
	case *actors.Crash:
		panic(fmt.Sprintf("amqpactor: sender %s: %s", s.label(), m.Reason))
	case *actor.Restarting:
		s.onRestarting(ctx)
	case *actor.Stopped:
		s.set(evStop, nil)
	case *actor.Stopping:
		if s.drain == nil && !s.isParentGone() {
			// Stopped by its supervisor or by a restarting publisher:
			// nothing fails, the publisher routes what waits anew, and
			// what the old link hands back goes where the rest goes.
			if s.reports != nil && s.link != nil {
				s.reports.redirect(s.handBackTo(ctx))
			}
			s.handOff(ctx)
			return
		}
		if s.timer != nil {
			s.timer.Stop()
		}
		if s.idleTimer != nil {
			s.idleTimer.Stop()
		}
		// The link's unsent publishes join those waiting, and all fail.
		s.endLink(ctx, protocol.ErrStopped, nil, false)
		s.failWaiting(protocol.ErrStopped)
	}
}

// onPublish takes a publish for the link.
func (s *sender) onPublish(ctx actor.Context, m *protocol.Publish) {
	if s.drain != nil {
		m.Answer(protocol.ErrStopped)
		return
	}
	if s.link != nil {
		s.writeQ.Push(job{p: m})
		return
	}
	if s.refusal != nil && time.Now().Before(s.refusedUntil) {
		// Refused a moment ago: answer at once rather than ask the
		// broker again (and, on RabbitMQ 4, lose the session again).
		m.Answer(s.refusal)
		return
	}
	s.pending = append(s.pending, m)
	if s.sess != nil && s.st != stAttaching && s.timer == nil {
		s.attach(ctx)
	}
}

// isParentGone reports whether the publisher has stopped for good.
func (s *sender) isParentGone() bool {
	select {
	case <-s.parentGone:
		return true
	default:
		return false
	}
}

// handBackTo is where the publishes a stopping sender lets go of go.
func (s *sender) handBackTo(ctx actor.Context) *actor.PID {
	if s.handTo != nil {
		return s.handTo
	}
	return ctx.Parent()
}

// tick is the period of the idle check.
func (s *sender) tick() time.Duration { return max(s.idle/4, time.Millisecond) }

// onIdleTick retires the sender once nothing was published through it for
// s.idle: no publish written or offered, none waiting, no attach under way.
func (s *sender) onIdleTick(ctx actor.Context) {
	s.idleTimer = nil
	if s.drain != nil {
		return
	}
	mark := s.published.Load() + s.failed.Load() + s.lane.Used()
	now := time.Now()
	busy := s.waiting() > 0 || s.st == stAttaching || (s.writeQ != nil && s.writeQ.Len() > 0)
	switch {
	case mark != s.lastMark || busy:
		s.lastMark, s.lastActive = mark, now
	case now.Sub(s.lastActive) >= s.idle:
		s.retire(ctx)
		return
	}
	s.idleTimer = s.env.After(s.tick(), ctx.Self(), &idleTick{})
}

// retire begins the retirement (see the package documentation).
func (s *sender) retire(ctx actor.Context) {
	if !s.set(evRetire, nil) {
		return
	}
	s.stopTimers()
	self, parent := ctx.Self(), ctx.Parent()
	// The parent hears of it before the lane closes: whatever the lane
	// refuses from now on reaches the parent after this.
	ctx.Send(parent, &Retiring{PID: self})
	s.lane.q.Store(nil)
	s.pending = append(s.pending, s.lane.takeParked()...)
	for _, p := range s.resend {
		ctx.Send(parent, p)
	}
	for _, p := range s.pending {
		ctx.Send(parent, p)
	}
	s.resend, s.pending = nil, nil
	if s.attaching != nil {
		return // whileRetiring finishes it when the attach answers
	}
	if s.link == nil {
		ctx.Send(parent, &Retired{PID: self})
		return
	}
	// Whatever the writer or the confirmer hands back reaches this sender
	// before Retired reaches the parent, which stops it.
	env := s.env
	s.letLinkGo(func() { env.Root.Send(parent, &Retired{PID: self}) })
}

// onRestarting lets go of what this incarnation holds before the next one
// is built (see the package documentation): the publishes waiting for a
// link go back to the parent, which routes them to the next incarnation;
// what was handed to the writer is written and confirmed on the old link,
// which closes after its confirmer returns.
func (s *sender) onRestarting(ctx actor.Context) {
	if d := s.kept.detached; d != nil {
		d.pending, d.resend, s.pending, s.resend = s.pending, s.resend, nil, nil
	} else {
		s.kept.panics.Add(1)
	}
	s.kept.sess, s.kept.drained = s.sess, s.drain != nil
	s.set(evRestart, nil)
	s.handOff(ctx)
}

// handOff gives the parent what waits for a link and lets the writer and
// the confirmer finish what they have on the old link, which closes after
// the confirmer returns.
func (s *sender) handOff(ctx actor.Context) {
	s.stopTimers()
	s.lane.q.Store(nil)
	parent := s.handBackTo(ctx)
	s.pending = append(s.pending, s.lane.takeParked()...)
	for _, p := range s.resend {
		ctx.Send(parent, p)
	}
	for _, p := range s.pending {
		ctx.Send(parent, p)
	}
	s.resend, s.pending = nil, nil
	if s.link == nil {
		// An attach in flight answers the next incarnation, which takes
		// its link or closes it.
		return
	}
	// What the writer or the confirmer hands back (linkEnded) reaches the
	// next incarnation, whose generations are new: it sends them again.
	s.letLinkGo(nil)
}

func (s *sender) stopTimers() {
	for _, t := range []**time.Timer{&s.idleTimer, &s.timer} {
		if *t != nil {
			(*t).Stop()
			*t = nil
		}
	}
}

// letLinkGo lets the writer and the confirmer finish what they have on the
// link, closes it after the confirmer returns, then runs then (if any), on
// a goroutine of its own. The marker follows everything handed to the link
// through the writer and the confirmer, which both return after it.
func (s *sender) letLinkGo(then func()) {
	link, wq, done, env := s.link, s.writeQ, s.confirmerDone, s.env
	s.link, s.writeQ = nil, nil
	wq.PushClose(job{drain: &protocol.Drain{Ctx: context.Background(), Done: make(chan error, 1)}})
	env.Go(func() {
		cctx, cancel := env.CloseCtx(context.Background())
		defer cancel()
		select {
		case <-done:
		case <-cctx.Done():
		}
		_ = link.Close(cctx)
		<-done
		if then != nil {
			then()
		}
	})
}

// whileRetiring handles what a retiring sender gets: publishes go to the
// parent, an attach that comes back is undone. It reports false for what
// Receive handles as usual (Stopping, Describe).
func (s *sender) whileRetiring(ctx actor.Context) bool {
	switch m := ctx.Message().(type) {
	case *protocol.Publish:
		ctx.Send(s.handBackTo(ctx), m)
	case *Wake:
		for _, p := range s.lane.takeParked() {
			ctx.Send(s.handBackTo(ctx), p)
		}
	case *linkEnded:
		for _, p := range m.unsent {
			ctx.Send(s.handBackTo(ctx), p)
		}
	case *attachResult:
		if m.link != nil {
			s.closeLink(m.link, context.Background())
		}
		if m.sess == s.attaching {
			// The answer retire waited for; an older attach's answer
			// (another session's) is only closed.
			s.attaching = nil
			ctx.Send(ctx.Parent(), &Retired{PID: ctx.Self()})
		}
	case *protocol.Drain:
		m.Done <- nil
	case *SessionDown:
		s.sess = nil
	case *SessionUp, *retry, *idleTick, *Retire:
	default:
		return false
	}
	return true
}

// attach attaches a link on the current session, unless an attach is in
// flight on it already. Two at once would both succeed, and the second
// link's writer would replace the first's without closing its queue: the
// first writer (and its confirmer) would then wait for ever, and Stop with
// them. That happened when a retry timer armed before a lost connection
// fired after the new session's SessionUp had started an attach.
func (s *sender) attach(ctx actor.Context) {
	if s.attaching != nil && s.attaching == s.sess {
		return
	}
	if s.timer != nil {
		// This attach is the retry the timer was for.
		s.timer.Stop()
		s.timer = nil
	}
	if !s.set(evAttach, nil) {
		return
	}
	s.attaching = s.sess
	self, sess, env := ctx.Self(), s.sess, s.env
	opts := transport.SenderOptions{Address: s.addr}
	env.Go(func() {
		actx, cancel := env.AttachCtx(nil)
		defer cancel()
		link, err := sess.NewSender(actx, opts)
		env.Root.Send(self, &attachResult{sess: sess, link: link, err: err})
	})
}

func (s *sender) onAttach(ctx actor.Context, m *attachResult) {
	if m.err == nil && s.addr.IsZero() {
		if _, ok := m.link.(transport.Relay); !ok {
			s.closeLink(m.link, context.Background())
			m.link, m.err = nil, &transport.LinkError{Address: "(anonymous)", Op: "attach",
				Err: &amqp.Error{Condition: amqp.ErrCondNotImplemented, Description: "the transport has no anonymous relay"}}
		}
	}
	if m.sess == s.attaching {
		s.attaching = nil
	}
	if m.sess != s.sess {
		// Tried on a session that has since been replaced: its answer
		// says nothing about the current one.
		if m.link != nil {
			s.closeLink(m.link, context.Background())
		}
		if s.attaching == nil && s.link == nil {
			if s.st == stAttaching {
				s.set(evDetached, nil)
			}
			if s.sess != nil && s.drain == nil {
				s.attach(ctx)
			}
		}
		return
	}
	if m.err != nil {
		if s.link != nil {
			// A superseded attach failed (a predecessor's, answering this
			// incarnation): the link attached meanwhile stands.
			s.env.Log.Debug("amqpactor: sender: a superseded attach failed", "address", s.label(), "error", m.err)
			return
		}
		s.set(evAttachFailed, m.err)
		s.lastErr = m.err
		if sessionEnded(m.err) && s.sess != nil {
			ctx.Send(ctx.Parent(), &SessionLost{Session: s.sess, Err: m.err})
			s.sess = nil
		}
		s.env.Log.Warn("amqpactor: sender attach failed", "address", s.label(), "error", m.err)
		s.attempt++
		if !actors.Refused(m.err) {
			// Transient (the session or connection went, a declare
			// timed out): what waits keeps waiting, bounded by each
			// publisher's context, and the attach is tried again.
			s.set(evBackoff, m.err)
			if s.sess != nil && s.timer == nil {
				s.timer = s.env.After(s.env.Backoff.Delay(s.attempt), ctx.Self(), &retry{})
			}
			return
		}
		// A refused attach fails what waits for it: each publisher hears
		// the broker's reason. Publishes within the backoff get the same
		// answer; later ones try again.
		s.set(evRefused, m.err)
		s.refusal, s.refusedUntil = m.err, time.Now().Add(s.env.Backoff.Delay(s.attempt))
		s.failWaiting(m.err)
		return
	}
	if s.drain != nil || s.sess == nil || s.link != nil {
		// Stopping, no session, or a link already attached (never two
		// writers for one sender).
		s.closeLink(m.link, context.Background())
		if s.link == nil && s.attaching == nil && s.st == stAttaching {
			s.set(evDetached, nil) // no answer is to come
		}
		return
	}
	if !s.set(evAttached, nil) {
		s.closeLink(m.link, context.Background())
		return
	}
	s.link = m.link
	s.gen = s.env.Gen()
	s.attachedAt = time.Now()
	s.refusal = nil
	s.writeQ = workq.New[job]()
	confirmQ := workq.New[job]()
	done := make(chan struct{})
	s.confirmerDone = done
	to := &reports{env: s.env}
	to.pid.Store(ctx.Self())
	s.reports = to
	link, gen, wq := s.link, s.gen, s.writeQ
	s.env.Go(func() { s.writer(to, link, gen, wq, confirmQ) })
	s.env.Go(func() {
		defer close(done)
		s.confirmer(to, gen, confirmQ)
	})
	s.pending = append(s.pending, s.lane.takeParked()...)
	for _, p := range s.resend {
		s.resent.Add(1)
		wq.Push(job{p: p})
	}
	for _, p := range s.pending {
		wq.Push(job{p: p})
	}
	s.resend, s.pending = nil, nil
	s.lane.q.Store(wq)
}

// keep puts publishes handed back by a dead link's goroutines with those
// waiting for the next link: written-but-unconfirmed ones after earlier
// ones of their kind, unsent ones before what waited already.
func (s *sender) keep(ps []*protocol.Publish, written bool) {
	if written {
		s.resend = append(s.resend, ps...)
		return
	}
	s.pending = append(ps, s.pending...)
}

// writer sends in order without waiting for outcomes, until the actor
// closes wq (the link ended, or a drain was queued last). One channel to
// wait on, not a select with a cancel: the select was 3% of the in-process
// CPU.
func (s *sender) writer(to *reports, link transport.Sender, gen uint64, wq, cq *workq.Q[job]) {
	defer cq.Close()
	relay, _ := link.(transport.Relay)
	if !s.addr.IsZero() {
		relay = nil
	}
	for range wq.Ready() {
		items, closed := wq.Take()
		for i, j := range items {
			if j.drain != nil {
				cq.Push(j)
				continue
			}
			p := j.p
			if err := p.Ctx.Err(); err != nil {
				p.Answer(err)
				continue
			}
			var receipt transport.Receipt
			var err error
			if relay != nil {
				receipt, err = relay.SendTo(p.Ctx, p.Address, p.Message, p.Settled)
			} else {
				receipt, err = link.Send(p.Ctx, p.Message, p.Settled)
			}
			if err != nil {
				if p.Ctx.Err() != nil {
					p.Answer(err)
					continue
				}
				if relay != nil && !actors.LinkGone(err) {
					// Its address could not be spelt or declared: that
					// publish fails, the link goes on.
					s.failed.Add(1)
					p.Answer(fmt.Errorf("amqpactor: publish to %s: %w", p.Address, err))
					continue
				}
				// The link died under us: everything not yet written goes
				// back to the actor to be sent on the next link.
				unsent := make([]*protocol.Publish, 0, len(items)-i)
				for _, r := range items[i:] {
					if r.p != nil {
						unsent = append(unsent, r.p)
					} else {
						r.drain.Done <- err
					}
				}
				more, _ := wq.Take()
				for _, r := range more {
					if r.p != nil {
						unsent = append(unsent, r.p)
					}
				}
				to.send(&linkEnded{link: gen, err: err, unsent: unsent})
				return
			}
			s.published.Add(1)
			if receipt == nil {
				s.confirmed.Add(1)
				p.Answer(nil)
				continue
			}
			if r, ok := receipt.(transport.Resolved); ok && cq.Len() == 0 {
				if o, done := r.Resolved(); done {
					s.answer(p, o)
					continue
				}
			}
			cq.Push(job{p: p, receipt: receipt})
		}
		if closed {
			return
		}
		// Publishes the batch resolved at once (in-process) made their
		// publishers runnable; one yield lets them queue their next ones, so
		// the next Take returns a batch instead of one or two publishes.
		if len(items) > 0 {
			runtime.Gosched()
		}
	}
}

// reports is where one link's writer and confirmer hand back what the link
// did not send or never had confirmed: the sender, or, once a sender
// stopped for good let the link go, the publisher it hands its publishes to
// (a stopped sender's mailbox is gone, and what was sent there with it).
type reports struct {
	env     *actors.Env
	pid     atomic.Pointer[actor.PID]
	publish atomic.Bool // the pid takes the publishes themselves
}

func (r *reports) send(m *linkEnded) {
	pid := r.pid.Load()
	if !r.publish.Load() {
		r.env.Root.Send(pid, m)
		return
	}
	for _, p := range m.unsent {
		r.env.Root.Send(pid, p)
	}
}

// redirect sends from now on the publishes handed back to pid.
func (r *reports) redirect(pid *actor.PID) {
	r.pid.Store(pid)
	r.publish.Store(true)
}

// answer tells a publisher the broker's outcome.
func (s *sender) answer(p *protocol.Publish, o messages.Outcome) {
	if o.Kind != messages.Accepted {
		s.failed.Add(1)
		p.Answer(&messages.OutcomeError{Address: p.Address.String(), Outcome: o})
		return
	}
	s.confirmed.Add(1)
	p.Answer(nil)
}

// confirmer waits for outcomes in send order and answers each publisher.
// A transfer whose link ended before its outcome came is handed back to the
// actor (with the link's error, which also tells an idle sender that its
// link is gone) to be sent again, unless its publisher's context has ended.
func (s *sender) confirmer(to *reports, gen uint64, cq *workq.Q[job]) {
	for range cq.Ready() {
		items, closed := cq.Take()
		var again []*protocol.Publish
		var gone error
		for _, j := range items {
			if j.drain != nil {
				j.drain.Done <- nil
				continue
			}
			outcome, err := j.receipt.Wait(j.p.Ctx)
			if rc, ok := j.receipt.(transport.ReusableReceipt); ok {
				rc.Recycle()
			}
			switch {
			case err != nil && j.p.Ctx.Err() == nil && actors.LinkGone(err):
				again = append(again, j.p)
				gone = err
			case err != nil:
				s.failed.Add(1)
				j.p.Answer(err)
			default:
				s.answer(j.p, outcome)
			}
		}
		if len(again) > 0 {
			to.send(&linkEnded{link: gen, err: gone, unsent: again, written: true})
		}
		if closed {
			return
		}
	}
}

func (s *sender) endLink(ctx actor.Context, err error, unsent []*protocol.Publish, written bool) {
	s.keep(unsent, written)
	if s.link == nil {
		return
	}
	link := s.link
	s.link = nil
	if time.Since(s.attachedAt) >= settledLink {
		// The link stayed: its end is a first failure again. One that
		// ends right after its attach keeps the backoff growing.
		s.attempt = 0
	}
	// Publishes pushed after the writer took its last batch are still in
	// its queue, which the writer stops reading once it is closed: they
	// wait for the next link. Closed first, so that nothing offered on the
	// lane lands after the last Take.
	s.lane.q.Store(nil)
	s.writeQ.Close()
	rest, _ := s.writeQ.Take()
	for _, j := range rest {
		if j.p != nil {
			s.pending = append(s.pending, j.p)
		}
	}
	s.writeQ = nil
	s.closeLink(link, context.Background())
	s.lastErr = err
	s.set(evDetached, err)
	if errors.Is(err, protocol.ErrStopped) || s.drain != nil {
		return
	}
	s.env.Log.Warn("amqpactor: sender link ended", "address", s.label(), "error", err)
	if sessionEnded(err) && s.sess != nil {
		// Keep what waits and re-attach once the publisher has a new session.
		ctx.Send(ctx.Parent(), &SessionLost{Session: s.sess, Err: err})
		s.sess = nil
		return
	}
	if s.sess != nil && s.waiting() > 0 {
		// A link that ends with publishes waiting is a failure of this
		// actor, which its parent's strategy decides (by default: restart,
		// and the next incarnation re-attaches after a backoff; see
		// actors.Supervisor). What waits goes to it through the parent.
		s.set(evBackoff, err)
		s.restarts++
		s.attempt++
		s.kept.detached = &detachedLink{err: err, restarts: s.restarts, attempt: s.attempt}
		var le *transport.LinkError
		if !errors.As(err, &le) {
			le = &transport.LinkError{Address: s.label(), Op: "send", Err: err}
		}
		panic(le)
	}
}

func (s *sender) closeLink(link transport.Sender, ctx context.Context) {
	env := s.env
	env.Go(func() {
		cctx, cancel := env.CloseCtx(ctx)
		defer cancel()
		_ = link.Close(cctx)
	})
}

// onDrain waits for every publish already handed to the link to be
// confirmed, then detaches. Publishes still waiting for a link fail.
func (s *sender) onDrain(m *protocol.Drain) {
	s.drain = m
	s.failWaiting(protocol.ErrStopped)
	if s.link == nil {
		m.Done <- nil
		return
	}
	link, wq := s.link, s.writeQ
	s.link, s.writeQ = nil, nil
	s.set(evDetached, nil)
	env := s.env
	confirmed := make(chan error, 1)
	// Nothing offered on the lane may follow the drain marker: it would be
	// written after the confirmations the drain waits for.
	s.lane.q.Store(nil)
	wq.PushClose(job{drain: &protocol.Drain{Ctx: m.Ctx, Done: confirmed}})
	grace := m.Grace()
	env.Go(func() {
		var err error
		select {
		case err = <-confirmed:
		case <-grace.Done():
			err = fmt.Errorf("amqpactor: waiting for publish confirmations on %s: %w", s.label(), grace.Err())
		}
		cctx, ccancel := env.CloseCtx(m.Ctx)
		if cerr := link.Close(cctx); err == nil && cerr != nil && !errors.Is(cerr, context.Canceled) {
			err = cerr
		}
		ccancel()
		m.Done <- err
	})
}

func (s *sender) describe(ctx actor.Context) *protocol.Described {
	n := &protocol.Node{
		Name: s.name(), Kind: "sender", PID: ctx.Self().String(),
		Address: s.label(), State: s.st.String(), Restarts: s.restarts + int(s.kept.panics.Load()),
		Counters: map[string]uint64{
			"panics":    s.kept.panics.Load(),
			"published": s.published.Load(),
			"confirmed": s.confirmed.Load(),
			"failed":    s.failed.Load(),
			"waiting":   uint64(s.waiting()),
			"resent":    s.resent.Load(),
		},
	}
	if s.link != nil {
		n.Address += " (" + s.link.Address() + ")"
	}
	if s.lastErr != nil {
		n.LastError = s.lastErr.Error()
	}
	return &protocol.Described{Node: n}
}
