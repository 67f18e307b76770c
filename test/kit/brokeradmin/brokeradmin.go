// Package brokeradmin holds the management requests only the project's
// tests and benchmarks make, to clean up what they declared on RabbitMQ 4:
// delete and purge a queue, delete an exchange, remove a binding. The
// runtime only declares, so these are not part of amqpwire.Management; they
// are built on its general Request.
package brokeradmin

import (
	"context"
	"errors"
	"strings"

	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// DeleteQueue deletes the queue name. Deleting a missing queue succeeds.
func DeleteQueue(ctx context.Context, m *amqpwire.Management, name string) error {
	_, err := m.Request(ctx, "DELETE", amqpwire.QueuePath(name), nil)
	return err
}

// PurgeQueue removes every ready message of the queue name.
func PurgeQueue(ctx context.Context, m *amqpwire.Management, name string) error {
	_, err := m.Request(ctx, "DELETE", amqpwire.QueuePath(name)+"/messages", nil)
	return err
}

// DeleteExchange deletes the exchange name. Deleting a missing exchange
// succeeds.
func DeleteExchange(ctx context.Context, m *amqpwire.Management, name string) error {
	_, err := m.Request(ctx, "DELETE", amqpwire.ExchangePath(name), nil)
	return err
}

// Unbind removes b (only bindings without arguments can be named this way).
// Removing a missing binding succeeds.
func Unbind(ctx context.Context, m *amqpwire.Management, b amqpwire.Binding) error {
	if b.Source == "" || (b.Queue == "") == (b.Exchange == "") {
		return errors.New("amqpactor: unbind: a binding needs a source exchange and exactly one of Queue or Exchange")
	}
	if len(b.Arguments) > 0 {
		return errors.New("amqpactor: unbind: bindings with arguments are not supported")
	}
	dst := "dstq=" + escape(b.Queue)
	if b.Exchange != "" {
		dst = "dste=" + escape(b.Exchange)
	}
	path := "/bindings/src=" + escape(b.Source) + ";" + dst + ";key=" + escape(b.Key) + ";args="
	_, err := m.Request(ctx, "DELETE", path, nil)
	return err
}

// escape percent-encodes s as the management node expects in every path
// segment: QueuePath's encoding, so that there is one encoder, not two.
func escape(s string) string {
	return strings.TrimPrefix(amqpwire.QueuePath(s), "/queues/")
}
