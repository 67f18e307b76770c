// Package receiver is the actor that owns one receiver link's life: it
// attaches the link, re-attaches it after a backoff when it ends (longer
// while the broker keeps detaching it: flapping.go), hands a partition
// queue to another replica (balance.go), drains it (drain.go), and
// describes it. The link's state is one linkState (state.go), which only
// linkState.on moves: attaching, attached, standby, degraded, handing-over,
// detached, backoff (shown as restarting) while it waits to attach again,
// restarting, failed, stopped. Its String is the node state the tree and
// the StateChanges show.
//
// What a link delivers, and the settles that go back, are the data plane
// (internal/deliver): once per link the actor makes a deliver.Link and
// hands it a relay (link.go), through which the pump's batches go to the
// subscription's dispatcher actor as *dispatcher.Deliveries, the handlers'
// verdicts come back to this actor as *Dispositions, and the link's
// goroutines report that it is idle or has ended. A late disposition for an
// ended link is dropped there.
//
// A poison delivery (transport.Poison: the transport found it unsafe to
// decode, or over the max message size) never reaches a partition: it is
// rejected with amqp:decode-error (PoisonCondition) and the reason, counted
// (counter "poison") and logged at warn; the link goes on.
package receiver

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/deliver"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/transport"
)

// Attached is sent to the parent after a successful attach, after a failed
// first attach (which decides Start), and when the receiver gives up
// (Failed: a terminal refusal came back actors.TerminalRetries times).
type Attached struct {
	Err    error
	Failed bool
}

// SessionLost tells the parent that the session ended under the link: a new
// link on it would fail too, so the parent opens a new session and replaces
// this receiver.
type SessionLost struct{ Err error }

// New returns the props of a receiver for spec on sess; deliveries go to
// the dispatcher actor to, as *dispatcher.Deliveries. A receiver made
// paused grants no credit until Resume. A replacement (after a lost session or connection) retries a failed first
// attach; the first receiver of a subscription reports it instead, since it
// decides Subscribe and Start.
func New(env *actors.Env, sess transport.Session, spec *protocol.SubscriptionSpec, to *actor.PID, paused, replacement bool) *actor.Props {
	k := &kept{paused: paused}
	return env.Props(func() actor.Actor {
		// Every incarnation starts from here: what they share is in k.
		r := &receiver{env: env, sess: sess, spec: spec, to: to, kept: k, Counters: &k.counters,
			replacement: replacement || k.panics.Load() > 0 || k.detached != nil, stopping: k.drained,
			paused: k.paused}
		if d := k.detached; d != nil {
			r.restarts, r.attempt, r.lastErr, r.st = d.restarts, d.attempt, d.err, d.state
			r.flaps, r.degraded = d.flaps, d.degraded
		}
		return r
	})
}

// kept is what one receiver's incarnations share; only the actor's mailbox
// run writes paused and drained (on Restarting, before the producer runs).
type kept struct {
	paused, drained bool
	panics          atomic.Uint64
	// detached is set by an incarnation that failed because its link
	// ended, for the next one to re-attach after a backoff.
	detached *detachedLink
	counters deliver.Counters
	// closed is closed once the last link given to closeLink is closed:
	// the next attach waits for it, so that what the old link held is
	// back on the broker before a new link can take newer messages.
	closed chan struct{}
}

// detachedLink is what an incarnation whose link ended hands the next.
type detachedLink struct {
	err               error
	restarts, attempt int
	state             linkState
	flaps             int
	degraded          bool
}

// StateStandby is the state of a receiver whose broker holds another
// consumer active on its single-active-consumer queue (RabbitMQ 4.3).
const StateStandby = "standby"

// StateDegraded is the state of a receiver attached again after links that
// the broker detached soon after they attached, until the link has stayed
// attached for the settled period (actors.Env.Settled). It is not ready:
// the broker may take this link too.
const StateDegraded = "degraded"

// linkActive names one attach, so that what the broker says of a link's
// activity is taken for that link only.
type linkActive struct {
	// said is what the broker said last: 0 nothing yet, 1 active, 2
	// standby. Kept here too, since it may say so before the attach's
	// answer reaches the actor.
	said atomic.Int32
}

type (
	attachResult struct {
		attempt int
		link    transport.Receiver
		err     error
		active  *linkActive // what the broker says of the link's activity
		stream  uint64      // the link's gen in the subscription's StreamCursor
	}
	// activeChanged: the broker said whether link is the active consumer.
	activeChanged struct {
		link   *linkActive
		active bool
	}
	linkEnded struct {
		link uint64
		err  error
	}
	reattach struct{ attempt int }
	// settledLink: the link of gen may have stayed attached for the
	// settled period.
	settledLink struct{ gen uint64 }
	// afterFailure follows a failure for its link in the mailbox: a
	// strategy that resumed the actor, rather than restarting it, leaves
	// d for it to re-attach.
	afterFailure struct{ d *detachedLink }
	// linkIdle: the link's pump has stopped and its last delivery is
	// settled (what a drain and a hand-over wait for).
	linkIdle struct{ link uint64 }
	// graceOver: the graceful part of a drain ended before the link's
	// handlers settled everything.
	graceOver struct{ link uint64 }
)

// receiver is the actor; every field is its mailbox run's, read and
// written by Receive alone. The goroutines it starts get what they are
// started with; the data plane's own share Counters, atomically.
type receiver struct {
	env  *actors.Env
	sess transport.Session
	spec *protocol.SubscriptionSpec
	to   *actor.PID // the dispatcher

	link transport.Receiver
	gen  uint64
	dl   *deliver.Link // link's data plane; nil without a link

	st          linkState
	lastErr     error
	restarts    int
	attempt     int
	terminal    int // terminal refusals in a row
	replacement bool
	stopping    bool
	drain       *protocol.Drain
	alsoDone    []chan<- error // drains that came while drain was in progress
	paused      bool           // the data plane hears of each change (deliver.Link.Pause, Resume)
	timer       *time.Timer
	// attachedAt is when the current link attached; flaps counts the links
	// in a row that ended before the settled period (actors.Env.Settled),
	// which lengthens the backoff; degraded: the strategy said the flaps
	// spent the restart budget (actors.LinkDegraded). settleTimer ends
	// the settled period of a degraded link.
	attachedAt  time.Time
	flaps       int
	degraded    bool
	settleTimer *time.Timer
	// active names the current link's attach; activeKnown and isActive
	// are what the broker last said of it (a single-active-consumer queue).
	active                *linkActive
	activeKnown, isActive bool
	kept                  *kept
	// Balancing partitions across replicas (balance.go): self is the PID
	// the Balance knows, balTimer the next poll of partition 0's receiver.
	self     *actor.PID
	balTimer *time.Timer
	// attachDelivered is the delivered count when the link attached.
	attachDelivered uint64
	// census is partition 0's link to the census queue (balance.go).
	census transport.Receiver
	// censusGen is the link generation whose census attach was asked
	// for: one attach per link, even when it is refused.
	censusGen uint64
	// countFailing: the last read of the census queue's consumers failed
	// (warned once; balancing waits until a read works again).
	countFailing bool

	*deliver.Counters // the kept ones: a restart keeps counting
}

func (r *receiver) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		switch {
		case r.stopping:
		case r.kept.detached != nil:
			// Restarted because the link ended: re-attach after a backoff.
			r.kept.detached = nil
			r.scheduleReattach(ctx)
		default:
			r.attach(ctx, 1)
		}
	case *Dispositions:
		m.link.Settle(m.Items)
		clear(m.Items)
		m.Items, m.From, m.link = m.Items[:0], nil, nil
		dispositions.Put(m)
	case *attachResult:
		r.onAttach(ctx, m)
	case *linkIdle:
		if m.link == r.gen && r.link != nil && r.drain != nil {
			r.finishDrainedLink()
		} else if m.link == r.gen && r.link != nil && r.st == stHandingOver {
			r.finishHandover(ctx)
		}
	case *protocol.Handover:
		r.onHandover()
	case *balanceTick:
		r.onBalanceTick(ctx, m)
	case *consumersRead:
		r.onConsumersRead(ctx, m)
	case *censusAttached:
		r.onCensusAttached(m)
	case *graceOver:
		if m.link == r.gen && r.link != nil && r.drain != nil {
			r.cutDrainedLink()
		}
	case *linkEnded:
		r.onLinkEnded(ctx, m)
	case *activeChanged:
		if m.link == r.active && r.link != nil {
			r.showActive(m.link.said.Load())
		}
	case *settledLink:
		r.onSettled(m)
	case *afterFailure:
		if r.kept.detached == m.d {
			// Resumed, not restarted: no next incarnation will take d.
			r.kept.detached = nil
			if !r.stopping {
				r.scheduleReattach(ctx)
			}
		}
	case *actors.LinkDegraded:
		r.onDegraded(ctx, m)
	case *reattach:
		// Only the backoff the timer was for: a stale timer (a late
		// answer scheduled another) must not start a second attach.
		if !r.stopping && r.link == nil && r.st == stBackoff {
			r.attach(ctx, m.attempt)
		}
	case *protocol.Pause:
		r.pause()
	case *protocol.Resume:
		if r.paused {
			r.paused = false
			if r.dl != nil {
				r.dl.Resume()
			}
		}
	case *protocol.Drain:
		r.onDrain(ctx, m)
	case *protocol.Describe:
		ctx.Respond(r.describe(ctx))
	case *testhook.Crash:
		panic(fmt.Sprintf("amqpactor: receiver %s: %s", r.spec.Address, m.Reason))
	case *actor.Restarting:
		if r.kept.detached == nil {
			r.kept.panics.Add(1)
		}
		r.kept.paused = r.paused
		r.kept.drained = r.stopping
		if r.timer != nil {
			r.timer.Stop()
		}
		r.stopSettleTimer()
		r.stopBalance()
		r.endLink(context.Background(), nil)
		r.finishDrain(protocol.ErrStopped)
		r.set(evRestart, nil)
	case *actor.Stopped:
		r.set(evStop, nil)
	case *actor.Stopping:
		r.stopping = true
		if r.timer != nil {
			r.timer.Stop()
		}
		r.stopSettleTimer()
		r.stopBalance()
		r.endLink(context.Background(), nil)
		r.finishDrain(protocol.ErrStopped)
	}
}
