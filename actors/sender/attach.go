package sender

import (
	"context"
	"errors"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/publish"
	"github.com/amqpactor/amqpactor/transport"
)

// attach attaches a link on the current session, unless an attach is in
// flight on it already. Two at once would both succeed, and the second
// link's writer would replace the first's without closing its queue: the
// first writer (and its confirmer) would then wait for ever, and Stop with
// them. A retry timer armed before a lost connection that fires after the
// new session's SessionUp started an attach is such a second attach.
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
		s.onAttachFailed(ctx, m.err)
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
	s.gen = s.env.Gen()
	s.attachedAt = time.Now()
	s.refusal = nil
	to := &reports{env: s.env}
	to.pid.Store(ctx.Self())
	s.reports = to
	// What waited, and what was parked on the lane, goes on the link
	// before the lane opens.
	s.link = publish.Start(publish.Config{
		Link: m.link, Gen: s.gen, Anonymous: s.addr.IsZero(), Lane: s.lane,
		Counts: &s.counts, Ended: to.send, Go: s.env.Go,
	}, &s.waiting)
}

func (s *sender) onAttachFailed(ctx actor.Context, err error) {
	if s.link != nil {
		// A superseded attach failed (a predecessor's, answering this
		// incarnation): the link attached meanwhile stands.
		s.env.Log.Debug("amqpactor: sender: a superseded attach failed", "address", s.label(), "error", err)
		return
	}
	s.set(evAttachFailed, err)
	s.lastErr = err
	if sessionEnded(err) && s.sess != nil {
		ctx.Send(ctx.Parent(), &SessionLost{Session: s.sess, Err: err})
		s.sess = nil
	}
	s.env.Log.Warn("amqpactor: sender attach failed", "address", s.label(), "error", err)
	s.attempt++
	if !actors.Refused(err) {
		// Transient (the session or connection went, a declare
		// timed out): what waits keeps waiting, bounded by each
		// publisher's context, and the attach is tried again.
		s.set(evBackoff, err)
		if s.sess != nil && s.timer == nil {
			s.timer = s.env.After(s.env.Backoff.Delay(s.attempt), ctx.Self(), &retry{})
		}
		return
	}
	// A refused attach fails what waits for it: each publisher hears
	// the broker's reason. Publishes within the backoff get the same
	// answer; later ones try again.
	s.set(evRefused, err)
	s.refusal, s.refusedUntil = err, time.Now().Add(s.env.Backoff.Delay(s.attempt))
	s.failWaiting(err)
}

func sessionEnded(err error) bool {
	var se *amqp.SessionError
	return errors.As(err, &se)
}
