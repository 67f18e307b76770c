package session

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/sender"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// NewPublisher returns the props of the publisher session actor.
func NewPublisher(env *actors.Env) *actor.Props {
	return env.Props(func() actor.Actor {
		return &publisher{env: env, senders: map[address.Address]*actor.PID{}}
	}, actor.WithSupervisor(actors.Supervisor()))
}

type retrySession struct{ conn transport.Conn }

type publisher struct {
	env      *actors.Env
	conn     transport.Conn
	sess     transport.Session
	senders  map[address.Address]*actor.PID
	order    []*actor.PID
	state    string
	lastErr  error
	attempt  int
	timer    *time.Timer
	draining bool
}

func (p *publisher) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.state = messages.StateDetached
	case *messages.ConnUp:
		p.conn = m.Conn
		p.state = messages.StateAttaching
		openSession(p.env, ctx.Self(), m.Conn)
	case *retrySession:
		p.timer = nil
		if m.conn == p.conn && p.sess == nil && !p.draining {
			openSession(p.env, ctx.Self(), m.conn)
		}
	case *sessionResult:
		if m.conn != p.conn || p.draining {
			if m.sess != nil {
				closeSession(p.env, m.sess, context.Background(), nil)
			}
			return
		}
		if m.err != nil {
			p.lastErr = m.err
			p.state = messages.StateRestarting
			p.attempt++
			p.timer = p.env.After(p.env.Backoff.Delay(p.attempt), ctx.Self(), &retrySession{conn: m.conn})
			return
		}
		p.sess, p.attempt, p.state = m.sess, 0, messages.StateAttached
		for _, pid := range p.order {
			ctx.Send(pid, &sender.SessionUp{Session: p.sess})
		}
	case *messages.ConnDown:
		p.conn, p.sess, p.state = nil, nil, messages.StateDetached
		for _, pid := range p.order {
			ctx.Send(pid, &sender.SessionDown{Err: m.Err})
		}
	case *messages.Publish:
		if p.draining {
			m.Done <- messages.ErrStopped
			return
		}
		pid, ok := p.senders[m.Address]
		if !ok {
			var err error
			pid, err = ctx.SpawnNamed(sender.New(p.env, m.Address, p.sess), "sender:"+m.Address.String())
			if err != nil {
				m.Done <- err
				return
			}
			p.senders[m.Address] = pid
			p.order = append(p.order, pid)
		}
		ctx.Send(pid, m)
	case *messages.Drain:
		p.draining = true
		sess, env := p.sess, p.env
		p.sess = nil
		p.state = messages.StateDetached
		waitAll(env, m.Ctx, p.order, func(err error) {
			if sess == nil {
				m.Done <- err
				return
			}
			closeSession(env, sess, m.Ctx, func(cerr error) {
				if err == nil {
					err = cerr
				}
				m.Done <- err
			})
		})
	case *messages.Describe:
		n := &messages.Node{Name: "publisher", Kind: "publisher", PID: ctx.Self().String(), State: p.state,
			Counters: map[string]uint64{"senders": uint64(len(p.order))}}
		if p.lastErr != nil {
			n.LastError = p.lastErr.Error()
		}
		ctx.Respond(&messages.Described{Node: n, Children: p.order})
	case *actor.Stopping:
		if p.timer != nil {
			p.timer.Stop()
		}
		if p.sess != nil {
			closeSession(p.env, p.sess, context.Background(), nil)
			p.sess = nil
		}
	}
}
