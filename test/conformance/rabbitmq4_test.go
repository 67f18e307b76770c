package conformance_test

import (
	"context"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/test/conformance"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
	"github.com/amqpactor/amqpactor/transport/amqpwire"

	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// TestRabbitMQ4 runs the same suite on a live RabbitMQ 4 (AMQP_URL, guest
// user). Queues are declared by the RabbitMQ4 dialect as quorum queues, which
// count modified{delivery-failed} in delivery-count. Broker differences are
// the Features below, never skips of whole behaviours.
func TestRabbitMQ4(t *testing.T) {
	url := livetest.URL(t, "the RabbitMQ 4 conformance run")
	v := livetest.RabbitMQ(t, url)
	conformance.Run(t, conformance.Factory{
		Name: "rabbitmq4",
		New: func(t *testing.T) amqpactor.Connector {
			return amqpactor.Dial(url, amqpactor.WithDialect(amqpactor.RabbitMQ4))
		},
		DeleteSubscription: func(topic amqpactor.Address, sub string) error {
			node, err := address.Render(address.RabbitMQ4, topic, address.Receive, sub)
			if err != nil {
				return err
			}
			return deleteQueue(url, node.Queue)
		},
		DeleteStream: func(name string) error { return deleteQueue(url, name) },
		Features: conformance.Features{
			DeliveryCountOnModified: true,  // quorum queues
			UndeliverableHereKeeps:  false, // RabbitMQ 4: undeliverable-here means do not requeue
			Transactions:            false, // go-amqp has no coordinator link
			FaultHooks:              false,
			UserID:                  []byte("guest"),
			BrokerDeadLetters:       true, // quorum queues declared with x-dead-letter-*
			BindingKeys:             true, // /exchanges/NAME routes by subject
			Streams:                 true, // stream queues over AMQP 1.0
			StreamPropertyFilters:   true, // 4.0 leaves it to the runtime's check
			StreamSQL:               v.AtLeast(4, 2),
		},
	})
}

// deleteQueue deletes the queue (or stream) name on the broker at url.
func deleteQueue(url, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := amqpwire.New(amqpwire.Config{URL: url, Dialect: address.RabbitMQ4}).Connect(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(ctx) }()
	return brokeradmin.DeleteQueue(ctx, c.(*amqpwire.Conn).Management(), name)
}
