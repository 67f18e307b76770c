package sender

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/publish"
	"github.com/amqpactor/amqpactor/internal/testhook"
)

func (s *sender) Receive(ctx actor.Context) {
	if s.st == stRetiring && s.whileRetiring(ctx) {
		return
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.onStarted(ctx)
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
		if s.link == nil && s.st != stAttaching && (s.waiting.Len() > 0 || s.hadLink()) {
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
		for _, p := range s.lane.TakeParked() {
			s.onPublish(ctx, p)
		}
	case *attachResult:
		s.onAttach(ctx, m)
	case *publish.Ended:
		s.onLinkEnded(ctx, m)
	case *retry:
		s.timer = nil
		s.waiting.Prune()
		if s.link == nil && s.sess != nil && s.waiting.Len() > 0 {
			s.attach(ctx)
		}
	case *protocol.Drain:
		s.onDrain(m)
	case *protocol.Describe:
		ctx.Respond(s.describe(ctx))
	case *testhook.Crash:
		panic(fmt.Sprintf("amqpactor: sender %s: %s", s.label(), m.Reason))
	case *actor.Restarting:
		s.onRestarting(ctx)
	case *actor.Stopped:
		s.set(evStop, nil)
	case *actor.Stopping:
		s.onStopping(ctx)
	}
}

func (s *sender) onStarted(ctx actor.Context) {
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
}

// onPublish takes a publish for the link.
func (s *sender) onPublish(ctx actor.Context, m *protocol.Publish) {
	if s.drain != nil {
		m.Answer(protocol.ErrStopped)
		return
	}
	if s.link != nil {
		s.link.Push(m)
		return
	}
	if s.refusal != nil && time.Now().Before(s.refusedUntil) {
		// Refused a moment ago: answer at once rather than ask the
		// broker again (and, on RabbitMQ 4, lose the session again).
		m.Answer(s.refusal)
		return
	}
	s.waiting.Add(m)
	if s.sess != nil && s.st != stAttaching && s.timer == nil {
		s.attach(ctx)
	}
}
