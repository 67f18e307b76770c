package receiver

import (
	"errors"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// ErrNotHeld is wrapped by Find and Claim when no link holds the message
// unsettled: it was not received by a subscription, it was received
// pre-settled, it is settled already, or its link has ended (the broker
// has it back).
var ErrNotHeld = errors.New("the message is not an unsettled delivery of a subscription")

func register(in *inflight)   { in.r.env.Holders.Add(in) }
func unregister(in *inflight) { in.r.env.Holders.Remove(in) }

// Held is one delivery a transaction settles: the link it came on and the
// transfer, for the transport's Txn.Accept, and the claim that keeps its
// handler's own settle from reaching the wire.
type Held struct {
	in  *inflight
	d   *protocol.Delivery
	m   *messages.Message
	Raw *amqp.Message
}

// Link is the receiver link the delivery came on.
func (h Held) Link() transport.Receiver { return h.in.link }

// Find returns the delivery m is the message of, while a link of env holds
// it unsettled; otherwise an error wrapping ErrNotHeld. A handler's message
// is the key, so the lookup walks the App's links; there are few, and only
// Tx.Accept looks.
func Find(env *actors.Env, m *messages.Message) (Held, error) {
	if env == nil {
		return Held{}, ErrNotHeld
	}
	var h Held
	found := false
	env.Holders.Range(func(x any) bool {
		in := x.(*inflight)
		in.mu.Lock()
		defer in.mu.Unlock()
		if in.cut {
			return true
		}
		for d := in.held.HeldNext; d != &in.held; d = d.HeldNext {
			if d.Message == m {
				h, found = Held{in: in, d: d, m: m, Raw: d.Raw}, true
				return false
			}
		}
		return true
	})
	if !found {
		return Held{}, ErrNotHeld
	}
	return h, nil
}

// stillLocked reports whether h's Delivery is still m's and held: a
// settled one goes back to a pool and may carry another message since.
func (h Held) stillLocked() bool {
	return !h.in.cut && h.d.HeldIn == h.in && h.d.Message == h.m
}

// Claim marks the delivery as the transaction's, just before it commits:
// its handler's settle then only returns its credit, and a drain does not
// release it. It fails, wrapping ErrNotHeld, when the delivery was settled
// or its link ended since Find.
func (h Held) Claim() error {
	h.in.mu.Lock()
	defer h.in.mu.Unlock()
	if !h.stillLocked() || h.d.Claimed {
		return ErrNotHeld
	}
	h.d.Claimed = true
	return nil
}

// Unclaim gives the delivery back to its handler after a commit that
// failed: the transaction settled nothing.
func (h Held) Unclaim() {
	h.in.mu.Lock()
	defer h.in.mu.Unlock()
	if h.stillLocked() {
		h.d.Claimed = false
	}
}
