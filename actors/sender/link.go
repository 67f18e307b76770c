package sender

import (
	"context"
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/publish"
	"github.com/amqpactor/amqpactor/transport"
)

// settledLink is how long a link stays attached before its end no longer
// counts with the failures before it: a link the broker detaches right after
// every attach re-attaches after a backoff that grows, not after the first
// one each time.
const settledLink = time.Second

// onLinkEnded takes what a link's writer or confirmer handed back.
func (s *sender) onLinkEnded(ctx actor.Context, m *publish.Ended) {
	switch {
	case m.Gen == s.gen && s.link != nil:
		s.endLink(ctx, m.Err, m.Unsent, m.Written)
	case s.link != nil:
		// The writer of an older link gave these back after a new link
		// was attached: what waits is not read again until the next
		// attach, so they go on the new link now.
		for _, p := range m.Unsent {
			s.link.Push(p)
		}
	case s.drain != nil:
		// Stopping: no link will come for them.
		for _, p := range m.Unsent {
			p.Answer(protocol.ErrStopped)
		}
	default:
		s.waiting.Keep(m.Unsent, m.Written)
		if s.waiting.Len() > 0 && s.sess != nil && s.st != stAttaching && s.timer == nil {
			s.attach(ctx)
		}
	}
}

// endLink detaches after the link ended (err): unsent and what the writer
// had not taken wait for the next link.
func (s *sender) endLink(ctx actor.Context, err error, unsent []*protocol.Publish, written bool) {
	s.waiting.Keep(unsent, written)
	if s.link == nil {
		return
	}
	k := s.link
	s.link = nil
	if time.Since(s.attachedAt) >= settledLink {
		// The link stayed: its end is a first failure again. One that
		// ends right after its attach keeps the backoff growing.
		s.attempt = 0
	}
	// Publishes pushed after the writer took its last batch are still in
	// its queue, which the writer stops reading once it is closed: they
	// wait for the next link.
	k.Stop(&s.waiting)
	s.closeLink(k.Sender(), context.Background())
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
	if s.sess != nil && s.waiting.Len() > 0 {
		// A link that ends with publishes waiting is a failure of this
		// actor, which its parent's strategy decides (by default: restart,
		// and the next incarnation re-attaches after a backoff; see
		// actors.Supervisor). What waits goes to it in kept.detached
		// (onRestarting), not through the parent.
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

// letLinkGo lets the writer and the confirmer finish what they have on the
// link, closes it after the confirmer returns, then runs then (if any), on
// a goroutine of its own.
func (s *sender) letLinkGo(then func()) {
	k, env := s.link, s.env
	s.link = nil
	k.Finish(make(chan error, 1))
	env.Go(func() {
		cctx, cancel := env.CloseCtx(context.Background())
		defer cancel()
		select {
		case <-k.Done():
		case <-cctx.Done():
		}
		_ = k.Sender().Close(cctx)
		<-k.Done()
		if then != nil {
			then()
		}
	})
}

func (s *sender) closeLink(link transport.Sender, ctx context.Context) {
	env := s.env
	env.Go(func() {
		cctx, cancel := env.CloseCtx(ctx)
		defer cancel()
		_ = link.Close(cctx)
	})
}
