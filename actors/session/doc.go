// Package session owns the AMQP sessions of an App: the publisher session
// (one session, one sender actor per address), one session per subscription
// (its receiver and dispatcher), and the requests session (the reply
// receiver of request/reply). Each opens its session off the actor when the
// connection comes up and drops it when the connection goes.
package session

import (
	"context"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// sessionResult reports an opened session for the connection it was opened on.
type sessionResult struct {
	conn transport.Conn
	sess transport.Session
	err  error
}

func openSession(env *actors.Env, self *actor.PID, conn transport.Conn) {
	env.Go(func() {
		ctx, cancel := env.CloseCtx(context.Background())
		defer cancel()
		sess, err := conn.NewSession(ctx)
		env.Root.Send(self, &sessionResult{conn: conn, sess: sess, err: err})
	})
}

func closeSession(env *actors.Env, sess transport.Session, ctx context.Context, done func(error)) {
	env.Go(func() {
		cctx, cancel := env.CloseCtx(ctx)
		defer cancel()
		err := sess.Close(cctx)
		if done != nil {
			done(err)
		}
	})
}

// drainThenClose drains pids off the actor as d says, then ends sess (if
// any), and answers d.Done with the first error met: the graceful stop of a
// session.
func drainThenClose(env *actors.Env, d *messages.Drain, pids []*actor.PID, sess transport.Session) {
	env.Go(func() {
		err := env.DrainAll(d, pids)
		if sess != nil {
			cctx, cancel := env.CloseCtx(d.Ctx)
			if cerr := sess.Close(cctx); err == nil {
				err = cerr
			}
			cancel()
		}
		d.Done <- err
	})
}
