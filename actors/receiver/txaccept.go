package receiver

import (
	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/deliver"
	"github.com/amqpactor/amqpactor/messages"
)

// ErrNotHeld is wrapped by Find and Claim when no link holds the message
// unsettled: it was not received by a subscription, it was received
// pre-settled, it is settled already, or its link has ended (the broker
// has it back).
var ErrNotHeld = deliver.ErrNotHeld

// Held is one delivery a transaction settles: the link it came on and the
// transfer, for the transport's Txn.Accept, and the claim that keeps its
// handler's own settle from reaching the wire (deliver.Held).
type Held = deliver.Held

// Find returns the delivery m is the message of, while a link of env holds
// it unsettled; otherwise an error wrapping ErrNotHeld.
func Find(env *actors.Env, m *messages.Message) (Held, error) {
	if env == nil {
		return Held{}, ErrNotHeld
	}
	return deliver.Find(&env.Holders, m)
}
