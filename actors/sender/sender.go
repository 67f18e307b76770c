package sender

import (
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/publish"
	"github.com/amqpactor/amqpactor/transport"
)

// Config says what a sender sends to.
type Config struct {
	// Address is the target; the zero Address is the anonymous terminus,
	// which needs a session whose connection offers the anonymous relay.
	Address address.Address
	// Session is the session to attach on; nil waits for SessionUp.
	Session transport.Session
	// Lane is the sender's Lane, kept by whoever spawns it; nil gives it
	// one nobody else uses.
	Lane *publish.Lane
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

// New returns the props of a sender.
func New(env *actors.Env, c Config) *actor.Props {
	if c.Lane == nil {
		c.Lane = publish.NewLane()
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
			s.waiting = d.waiting
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
	// waiting waits for the next link, which is this actor's: it stays
	// with it rather than go round through the parent.
	waiting publish.Waiting
}

// sender is one incarnation of the actor. Its Receive alone touches its
// fields, but for counts.
type sender struct {
	// Set by New.
	env        *actors.Env
	addr       address.Address
	parent     actors.Node     // the publisher's node
	parentGone <-chan struct{} // see Config.ParentGone; only received from
	handTo     *actor.PID      // see Config.HandTo
	lane       *publish.Lane
	idle       time.Duration // the idle time before it retires (0: never)
	kept       *kept

	sess    transport.Session
	link    *publish.Link   // the attached link's writer and confirmer; nil while detached
	gen     uint64          // the generation of the current (or last) link; 0 before the first
	reports *reports        // where the current link's writer and confirmer hand back
	waiting publish.Waiting // what waits for a link
	st      linkState
	lastErr error
	// restarts counts the link's ends that restarted the actor, attempt
	// the failures since the link last stayed (the backoff's exponent).
	restarts int
	attempt  int
	timer    *time.Timer // the retry of an attach
	drain    *protocol.Drain
	// attaching is the session an attach is in flight on, if any: its
	// answer is still to come. refusal is the broker's last refusal,
	// answered to publishes until refusedUntil.
	attaching    transport.Session
	refusal      error
	refusedUntil time.Time
	// attachedAt is when the current (or last) link attached.
	attachedAt time.Time

	// Retirement: lastMark and lastActive are the activity seen at the
	// last idle tick, and when it changed.
	idleTimer  *time.Timer
	lastMark   uint64
	lastActive time.Time

	// counts is counted by the writers and confirmers of this
	// incarnation's links, and read by describe and the idle check.
	counts publish.Counts
}

// name is the sender's name in the tree.
func (s *sender) name() string {
	if s.addr.IsZero() {
		return "sender:(anonymous)"
	}
	return "sender:" + s.addr.Name()
}

// label names the sender's target in logs.
func (s *sender) label() string {
	if s.addr.IsZero() {
		return "(anonymous)"
	}
	return s.addr.String()
}

// set moves the sender's state on ev (linkState.on) and reports a change
// of its public name (see actors.Env.SetState). An illegal transition is a
// bug of this package: it is logged at Error and the state kept, since a
// panic would restart the sender (re-sending what its link had) for
// bookkeeping.
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

// failWaiting answers every publish that waits for a link, and every one
// parked on the lane, with err.
func (s *sender) failWaiting(err error) {
	s.waiting.Add(s.lane.TakeParked()...)
	s.waiting.Fail(err)
}
