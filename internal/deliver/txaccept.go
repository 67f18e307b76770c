package deliver

import (
	"errors"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// ErrNotHeld is wrapped by Find and Claim when no link holds the message
// unsettled: it was not received by a subscription, it was received
// pre-settled, it is settled already, or its link has ended (the broker
// has it back).
var ErrNotHeld = errors.New("the message is not an unsettled delivery of a subscription")

// Held is one delivery a transaction settles: the link it came on and the
// transfer, for the transport's Txn.Accept, and the claim that keeps its
// handler's own settle from reaching the wire.
type Held struct {
	l   *Link
	d   *protocol.Delivery
	m   *messages.Message
	Raw *amqp.Message
}

// Link is the receiver link the delivery came on.
func (h Held) Link() transport.Receiver { return h.l.cfg.Link }

// Find returns the delivery m is the message of, while a link of hs holds
// it unsettled; otherwise an error wrapping ErrNotHeld. A handler's message
// is the key, so the lookup walks the App's links; there are few, and only
// Tx.Accept looks.
func Find(hs Holders, m *messages.Message) (Held, error) {
	var h Held
	found := false
	hs.Range(func(x any) bool {
		l := x.(*Link)
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.cut {
			return true
		}
		for d := l.held.HeldNext; d != &l.held; d = d.HeldNext {
			if d.Message == m {
				h, found = Held{l: l, d: d, m: m, Raw: d.Raw}, true
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
	return !h.l.cut && h.d.HeldIn == h.l && h.d.Message == h.m
}

// Claim marks the delivery as the transaction's, just before it commits:
// its handler's settle then only returns its credit, and a drain does not
// release it. It fails, wrapping ErrNotHeld, when the delivery was settled
// or its link ended since Find.
func (h Held) Claim() error {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	if !h.stillLocked() || h.d.Claimed {
		return ErrNotHeld
	}
	h.d.Claimed = true
	return nil
}

// Unclaim gives the delivery back to its handler after a commit that
// failed: the transaction settled nothing.
func (h Held) Unclaim() {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	if h.stillLocked() {
		h.d.Claimed = false
	}
}
