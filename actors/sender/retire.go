package sender

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/publish"
)

// tick is the period of the idle check.
func (s *sender) tick() time.Duration { return max(s.idle/4, time.Millisecond) }

// onIdleTick retires the sender once nothing was published through it for
// s.idle: no publish written or offered, none waiting, no attach under way.
func (s *sender) onIdleTick(ctx actor.Context) {
	s.idleTimer = nil
	if s.drain != nil {
		return
	}
	mark := s.counts.Published.Load() + s.counts.Failed.Load() + s.lane.Used()
	now := time.Now()
	busy := s.waiting.Len() > 0 || s.st == stAttaching || (s.link != nil && s.link.Queued() > 0)
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
	s.lane.Close()
	s.waiting.Add(s.lane.TakeParked()...)
	s.waiting.Hand(func(p *protocol.Publish) { ctx.Send(parent, p) })
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

// whileRetiring handles what a retiring sender gets: publishes go to the
// parent, an attach that comes back is undone. It reports false for what
// Receive handles as usual (Stopping, Describe).
func (s *sender) whileRetiring(ctx actor.Context) bool {
	switch m := ctx.Message().(type) {
	case *protocol.Publish:
		ctx.Send(s.handBackTo(ctx), m)
	case *Wake:
		for _, p := range s.lane.TakeParked() {
			ctx.Send(s.handBackTo(ctx), p)
		}
	case *publish.Ended:
		for _, p := range m.Unsent {
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
