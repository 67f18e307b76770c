package session

import (
	"context"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// replyCredit is the window of the reply receiver. Replies arrive
// pre-settled, so the pump tops it up as it reads.
const replyCredit = 256

// NewRequests returns the props of the requests actor: one reply receiver
// per app (a dynamic node where the broker has them, else a private reply
// queue the transport declares), attached on first Request and shared by
// every request, which it correlates by correlation-id.
func NewRequests(env *actors.Env) *actor.Props {
	return env.Props(func() actor.Actor {
		return &requests{env: env, waiting: map[string]chan<- messages.Reply{}}
	})
}

type (
	replyLink struct {
		conn transport.Conn
		sess transport.Session
		link transport.Receiver
		err  error
	}
	replyIn  struct{ msg *messages.Message }
	replyEnd struct{ err error }
)

type requests struct {
	env       *actors.Env
	conn      transport.Conn
	sess      transport.Session
	link      transport.Receiver
	cancel    context.CancelFunc
	attaching bool
	queued    []*messages.Request
	waiting   map[string]chan<- messages.Reply
	state     string
	lastErr   error
	sent      uint64
	answered  uint64
	orphans   uint64
	draining  bool
}

func (r *requests) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.state = messages.StateDetached
	case *messages.ConnUp:
		r.conn = m.Conn
		if len(r.queued) > 0 {
			r.attach(ctx)
		}
	case *messages.ConnDown:
		r.conn = nil
		r.drop()
		r.failAll(fmt.Errorf("amqpactor: request: connection lost: %w", m.Err))
	case *messages.Request:
		if r.draining {
			m.Reply <- messages.Reply{Err: messages.ErrStopped}
			return
		}
		if r.link == nil {
			r.queued = append(r.queued, m)
			if r.conn != nil && !r.attaching {
				r.attach(ctx)
			}
			return
		}
		r.send(ctx, m)
	case *replyLink:
		r.onLink(ctx, m)
	case *replyIn:
		key := messages.CorrelationKey(m.msg.CorrelationID)
		if ch, ok := r.waiting[key]; ok {
			delete(r.waiting, key)
			r.answered++
			ch <- messages.Reply{Message: m.msg}
		} else {
			r.orphans++ // its caller gave up
		}
	case *replyEnd:
		r.lastErr = m.err
		r.drop()
		r.failAll(fmt.Errorf("amqpactor: request: reply link ended: %w", m.err))
	case *messages.CancelRequest:
		delete(r.waiting, m.Key)
	case *messages.Drain:
		r.draining = true
		r.failAll(messages.ErrStopped)
		sess, link, cancel, env := r.sess, r.link, r.cancel, r.env
		r.sess, r.link, r.cancel = nil, nil, nil
		r.state = messages.StateDetached
		env.Go(func() {
			var err error
			if link != nil {
				cctx, c := env.CloseCtx(m.Ctx)
				err = link.Close(cctx)
				c()
				cancel()
			}
			if sess != nil {
				cctx, c := env.CloseCtx(m.Ctx)
				if cerr := sess.Close(cctx); err == nil {
					err = cerr
				}
				c()
			}
			m.Done <- err
		})
	case *messages.Describe:
		n := &messages.Node{Name: "requests", Kind: "requests", PID: ctx.Self().String(), State: r.state,
			Counters: map[string]uint64{"sent": r.sent, "answered": r.answered, "waiting": uint64(len(r.waiting)), "orphans": r.orphans}}
		if r.link != nil {
			n.Address = r.link.Address()
		}
		if r.lastErr != nil {
			n.LastError = r.lastErr.Error()
		}
		ctx.Respond(&messages.Described{Node: n})
	case *actor.Stopping:
		r.drop()
		r.failAll(messages.ErrStopped)
	}
}

func (r *requests) attach(ctx actor.Context) {
	r.attaching = true
	r.state = messages.StateAttaching
	self, conn, env := ctx.Self(), r.conn, r.env
	env.Go(func() {
		actx, cancel := env.CloseCtx(context.Background())
		defer cancel()
		sess, err := conn.NewSession(actx)
		if err != nil {
			env.Root.Send(self, &replyLink{conn: conn, err: err})
			return
		}
		link, err := sess.NewReceiver(actx, transport.ReceiverOptions{Dynamic: true, Settled: true, Credit: replyCredit})
		if err != nil {
			_ = sess.Close(actx)
		}
		env.Root.Send(self, &replyLink{conn: conn, sess: sess, link: link, err: err})
	})
}

func (r *requests) onLink(ctx actor.Context, m *replyLink) {
	r.attaching = false
	if m.conn != r.conn || r.draining {
		if m.sess != nil {
			closeSession(r.env, m.sess, context.Background(), nil)
		}
		return
	}
	if m.err != nil {
		r.lastErr = fmt.Errorf("amqpactor: attaching the reply receiver: %w", m.err)
		r.state = messages.StateRestarting
		// Requests waiting now learn why; later ones try again.
		for _, q := range r.queued {
			q.Reply <- messages.Reply{Err: r.lastErr}
		}
		r.queued = nil
		return
	}
	r.sess, r.link, r.state = m.sess, m.link, messages.StateAttached
	var lctx context.Context
	lctx, r.cancel = context.WithCancel(context.Background())
	self, link := ctx.Self(), m.link
	r.env.Go(func() { r.pump(self, link, lctx) })
	for _, q := range r.queued {
		r.send(ctx, q)
	}
	r.queued = nil
}

func (r *requests) pump(self *actor.PID, link transport.Receiver, ctx context.Context) {
	if err := link.IssueCredit(replyCredit); err != nil {
		r.env.Root.Send(self, &replyEnd{err: err})
		return
	}
	var read uint32
	for {
		raw, err := link.Receive(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.env.Root.Send(self, &replyEnd{err: err})
			}
			return
		}
		r.env.Root.Send(self, &replyIn{msg: messages.FromAMQP(raw)})
		if read++; read >= replyCredit/2 {
			if err := link.IssueCredit(read); err != nil {
				r.env.Root.Send(self, &replyEnd{err: err})
				return
			}
			read = 0
		}
	}
}

func (r *requests) send(ctx actor.Context, q *messages.Request) {
	if q.Ctx.Err() != nil {
		q.Reply <- messages.Reply{Err: q.Ctx.Err()}
		return
	}
	m := *q.Message
	m.ReplyTo = r.link.Address()
	raw, err := messages.ToAMQP(&m)
	if err != nil {
		q.Reply <- messages.Reply{Err: err}
		return
	}
	r.waiting[q.Key] = q.Reply
	r.sent++
	// The caller publishes it and awaits its outcome: the actor never waits
	// on a broker, and no goroutine is started per request.
	q.Reply <- messages.Reply{Send: raw}
}

func (r *requests) drop() {
	if r.cancel != nil {
		r.cancel()
		r.cancel = nil
	}
	if r.link != nil {
		link, sess, env := r.link, r.sess, r.env
		env.Go(func() {
			cctx, c := env.CloseCtx(context.Background())
			defer c()
			_ = link.Close(cctx)
			if sess != nil {
				_ = sess.Close(cctx)
			}
		})
	}
	r.link, r.sess = nil, nil
	r.state = messages.StateDetached
}

func (r *requests) failAll(err error) {
	for k, ch := range r.waiting {
		ch <- messages.Reply{Err: err}
		delete(r.waiting, k)
	}
	for _, q := range r.queued {
		q.Reply <- messages.Reply{Err: err}
	}
	r.queued = nil
}
