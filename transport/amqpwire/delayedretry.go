package amqpwire

import (
	"fmt"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport"
)

var _ transport.DelayedRetrier = (*connector)(nil)

// DelayedRetry reports whether the broker may hold a failure back itself:
// RabbitMQ 4 spells it with queue arguments; whether the release has it
// (4.3 and later) is known once connected (checkDelayedRetry).
func (c *connector) DelayedRetry() bool { return c.cfg.Dialect == address.RabbitMQ4 }

// checkDelayedRetry refuses a queue declared with delayed retry on a
// broker before RabbitMQ 4.3, which would take the arguments and ignore
// them: failures would come back at once.
func (c *Conn) checkDelayedRetry(o transport.ReceiverOptions) error {
	if _, ok := o.QueueArguments[transport.DelayedRetryType]; !ok {
		return nil
	}
	if c.amqp == nil {
		return nil
	}
	major, minor, ok := rabbitRelease(c.amqp.Properties())
	if ok && (major > 4 || major == 4 && minor >= 3) {
		return nil
	}
	v, _ := c.amqp.Properties()["version"].(string)
	return &transport.LinkError{Address: o.Address.String(), Op: "attach",
		Err: fmt.Errorf("%w: delayed retry on quorum queues needs RabbitMQ 4.3 or later; the broker is %q", transport.ErrNotSupported, v)}
}
