package amqp091

import (
	"github.com/amqpactor/amqpactor/address"
)

// noStreams is the error for a Stream address: this transport reads and
// appends to streams over AMQP 1.0 only (RabbitMQ 4, amqpactor.Dial).
func noStreams(a address.Address) error {
	return &address.Error{Address: a, Reason: "streams are offered over AMQP 1.0 only (Dial), not over AMQP 0-9-1"}
}

// CheckStream: no streams over 0-9-1.
func (c *connector) CheckStream(a address.Address) error {
	if a.IsStream() {
		return noStreams(a)
	}
	return nil
}
