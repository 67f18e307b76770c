// Package session owns the AMQP sessions of an App: the publisher session
// (the App's own publishes), the replies session (a Responder's replies),
// one session per subscription (its receiver and dispatcher), and the
// requests session (the reply receiver of request/reply). Each opens its
// session off the actor when the connection comes up (the replies session
// on the first reply, the requests session on the first request) and drops
// it when the connection goes.
//
// # Bounded sending
//
// The publisher keeps a dedicated sender (a link, an actor, a writer and a
// confirmer goroutine) for each address the App publishes to, up to
// DefaultMaxSenders (64; amqpactor.WithSenderLimits sets it). Past the
// bound, where the peer offers the anonymous relay (RabbitMQ 4, Artemis,
// the in-process broker), an address goes through one sender attached to
// the anonymous terminus, each message naming its address in
// properties.to; elsewhere the least recently used dedicated sender
// retires to make room, and the publish waits for it (bounded by its
// context). A sender unused for DefaultSenderIdle (1 minute) retires, the
// anonymous one too: its link detaches, its actor and goroutines end, and
// it leaves the table (Senders) through which the App hands publishes, so
// a retired sender is never handed one. A publish that races the
// retirement goes back to the publisher and is sent exactly once.
//
// Replies go through the replies publisher, a child of the publisher with a
// session of its own: through its anonymous sender where the peer offers
// the relay (a reply to a missing queue is released, and fails alone),
// else through its own bounded, retiring dedicated senders (RabbitMQ 4
// ends the whole session when it refuses an attach, which then never
// touches the session of the App's own publishes). At any moment an App
// holds at most 64 + 1 sender links for its own publishes and 1 (with the
// relay) or 64 (without) for replies; each link holds two goroutines, and
// one more while it attaches or retires.
package session

import (
	"context"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/transport"
)

// sessionResult reports an opened session for the connection it was opened on.
type sessionResult struct {
	conn transport.Conn
	sess transport.Session
	err  error
}

// openSession begins a session on conn, bounded by caller (nil: the
// runtime's own) and the attach's own bound (actors.Env.AttachCtx).
func openSession(env *actors.Env, self *actor.PID, conn transport.Conn, caller context.Context) {
	env.Go(func() {
		ctx, cancel := env.AttachCtx(caller)
		defer cancel()
		sess, err := conn.NewSession(ctx)
		env.Root.Send(self, &sessionResult{conn: conn, sess: sess, err: err})
	})
}

// closeSession ends sess, if any, off the actor (within the runtime's close
// bound), with no one waiting for the outcome.
func closeSession(env *actors.Env, sess transport.Session) {
	if sess == nil {
		return
	}
	env.Go(func() {
		cctx, cancel := env.CloseCtx(context.Background())
		defer cancel()
		_ = sess.Close(cctx)
	})
}

// drainThenClose drains pids off the actor as d says, then ends sess (if
// any), and answers d.Done with the first error met: the graceful stop of a
// session.
func drainThenClose(env *actors.Env, d *protocol.Drain, pids []*actor.PID, sess transport.Session) {
	env.Go(func() {
		d.Done <- closeAfter(env, d.Ctx, sess, env.DrainAll(d, pids))
	})
}

// closeAfter ends sess (if any) within ctx's close bound once what err
// came from is done, and returns the first error met: err, else the
// close's. It blocks: it runs in a goroutine of its own.
func closeAfter(env *actors.Env, ctx context.Context, sess transport.Session, err error) error {
	if sess == nil {
		return err
	}
	cctx, cancel := env.CloseCtx(ctx)
	defer cancel()
	if cerr := sess.Close(cctx); err == nil {
		err = cerr
	}
	return err
}
