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
		return &publisher{env: env, senders: map[address.Address]messages.SenderRef{}}
	}, actor.WithSupervisor(actors.Supervisor()))
}

type retrySession struct{ conn transport.Conn }

type publisher struct {
	env      *actors.Env
	conn     transport.Conn
	sess     transport.Session
	senders  map[address.Address]messages.SenderRef
	order    []*actor.PID
	state    string
	lastErr  error
	attempt  int
	timer    *time.Timer
	draining bool
}

// sender returns the sender actor of addr and its lane, spawning it on
// first use.
func (p *publisher) sender(ctx actor.Context, addr address.Address) (messages.SenderRef, error) {
	if ref, ok := p.senders[addr]; ok {
		return ref, nil
	}
	lane := sender.NewLane()
	pid, err := ctx.SpawnNamed(sender.New(p.env, addr, p.sess, lane), "sender:"+addr.String())
	if err != nil {
		return messages.SenderRef{}, err
	}
	ref := messages.SenderRef{PID: pid, Lane: lane}
	p.senders[addr] = ref
	p.order = append(p.order, pid)
	return ref, nil
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
	case *sender.SessionLost:
		if m.Session != p.sess || p.sess == nil || p.draining {
			return
		}
		p.lastErr = m.Err
		p.sess, p.state = nil, messages.StateRestarting
		for _, pid := range p.order {
			ctx.Send(pid, &sender.SessionDown{Err: m.Err})
		}
		if p.conn != nil {
			openSession(p.env, ctx.Self(), p.conn)
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
		ref, err := p.sender(ctx, m.Address)
		if err != nil {
			m.Done <- err
			return
		}
		ctx.Send(ref.PID, m)
	case *messages.SenderFor:
		if p.draining {
			m.Reply <- messages.SenderRef{Err: messages.ErrStopped}
			return
		}
		ref, err := p.sender(ctx, m.Address)
		ref.Err = err
		m.Reply <- ref
	case *messages.Drain:
		p.draining = true
		sess, env := p.sess, p.env
		p.sess = nil
		p.state = messages.StateDetached
		drainThenClose(env, m, p.order, sess)
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
