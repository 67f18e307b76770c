// Package txn owns the transaction controller of an App: it begins
// transactions on a connection that has them (transport.Transactional: the
// in-process broker, and RabbitMQ over AMQP 0-9-1), off the actor, and
// counts their outcomes. The transactional publishes and the discharge run
// in the caller's goroutine (the App's Transaction), which is not an actor
// and may block.
package txn

import (
	"fmt"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/transport"
)

// New returns the props of the txn actor; where names the connector in errors.
//
// A txn actor that panics is restarted by the connection's strategy. It
// owns no link or session: a Begin under way runs in a goroutine that
// answers its caller itself, so nothing waits on the dead incarnation. The
// next incarnation keeps the connection (no ConnUp comes on a restart) and
// the counters of its predecessor.
func New(env *actors.Env, where string) *actor.Props {
	k := &kept{}
	return env.Props(func() actor.Actor {
		return &controller{env: env, where: where, kept: k, conn: k.conn, counts: k.counts}
	})
}

// kept is what the txn actor's incarnations share; only its mailbox run
// writes it (on Restarting, then the producer reads it).
type kept struct {
	conn   transport.Conn
	counts counts
	panics atomic.Uint64
}

type counts struct{ begun, committed, rolledBk uint64 }

type controller struct {
	env   *actors.Env
	where string
	conn  transport.Conn
	counts
	kept *kept
}

func (c *controller) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *testhook.Crash:
		panic("amqpactor: txn: " + m.Reason)
	case *actor.Restarting:
		c.kept.panics.Add(1)
		c.kept.conn, c.kept.counts = c.conn, c.counts
	case *protocol.ConnUp:
		c.conn = m.Conn
	case *protocol.ConnDown:
		c.conn = nil
	case *protocol.Begin:
		c.begin(m)
	case *protocol.TxnEnded:
		if m.Committed {
			c.committed++
		} else {
			c.rolledBk++
		}
	case *protocol.Drain:
		m.Done <- nil
	case *protocol.Describe:
		state := protocol.StateDetached
		if c.conn != nil {
			state = protocol.StateAttached
		}
		counters := map[string]uint64{"begun": c.begun, "committed": c.committed, "rolledBack": c.rolledBk}
		if p := c.kept.panics.Load(); p > 0 {
			counters["panics"] = p
		}
		ctx.Respond(&protocol.Described{Node: &protocol.Node{
			Name: "txn", Kind: "txn", PID: ctx.Self().String(), State: state, Restarts: int(c.kept.panics.Load()),
			Counters: counters,
		}})
	}
}

func (c *controller) begin(m *protocol.Begin) {
	if c.conn == nil {
		m.Reply <- protocol.BeginResult{Err: fmt.Errorf("amqpactor: transaction on %s: not connected", c.where)}
		return
	}
	tc, ok := c.conn.(transport.Transactional)
	if !ok || !c.conn.Features().Transactions {
		m.Reply <- protocol.BeginResult{Err: fmt.Errorf(
			"amqpactor: transaction on %s: go-amqp has no transaction coordinator link yet, so live transactions are %w over AMQP 1.0 (the in-process broker has them, and so has RabbitMQ over AMQP 0-9-1: Dial091)",
			c.where, transport.ErrNotSupported)}
		return
	}
	c.begun++
	env := c.env
	env.Go(func() {
		t, err := tc.Begin(m.Ctx)
		m.Reply <- protocol.BeginResult{Txn: t, Err: err}
	})
}
