package sender

import (
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/publish"
)

// onStopping lets go of everything: to the publisher, which routes it anew,
// while the publisher lives; failed with ErrStopped once it has stopped
// for good, or when the sender was drained.
func (s *sender) onStopping(ctx actor.Context) {
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

// onRestarting lets go of what this incarnation holds before the next one
// is built (see the package documentation): the publishes waiting for a
// link go back to the parent, which routes them to the next incarnation;
// what was handed to the writer is written and confirmed on the old link,
// which closes after its confirmer returns.
func (s *sender) onRestarting(ctx actor.Context) {
	if d := s.kept.detached; d != nil {
		d.waiting, s.waiting = s.waiting, publish.Waiting{}
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
	s.lane.Close()
	parent := s.handBackTo(ctx)
	s.waiting.Add(s.lane.TakeParked()...)
	s.waiting.Hand(func(p *protocol.Publish) { ctx.Send(parent, p) })
	if s.link == nil {
		// An attach in flight answers the next incarnation, which takes
		// its link or closes it.
		return
	}
	// What the writer or the confirmer hands back (publish.Ended) reaches
	// the next incarnation, whose generations are new: it sends them again.
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

// reports is where one link's writer and confirmer hand back what the link
// did not send or never had confirmed (publish.Config.Ended): the sender,
// or, once a sender stopped for good let the link go, the publisher it
// hands its publishes to (a stopped sender's mailbox is gone, and what was
// sent there with it).
type reports struct {
	env       *actors.Env
	pid       atomic.Pointer[actor.PID]
	publishes atomic.Bool // the pid takes the publishes themselves
}

func (r *reports) send(m *publish.Ended) {
	pid := r.pid.Load()
	if !r.publishes.Load() {
		r.env.Root.Send(pid, m)
		return
	}
	for _, p := range m.Unsent {
		r.env.Root.Send(pid, p)
	}
}

// redirect sends from now on the publishes handed back to pid.
func (r *reports) redirect(pid *actor.PID) {
	r.pid.Store(pid)
	r.publishes.Store(true)
}
