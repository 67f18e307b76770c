package conformance_test

import (
	"testing"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/conformance"

	"github.com/amqpactor/amqpactor/internal/livetest"
)

// TestRabbitMQ4 runs the same suite on a live RabbitMQ 4 (AMQP_URL, guest
// user). Queues are declared by the RabbitMQ4 dialect as quorum queues, which
// count modified{delivery-failed} in delivery-count. Broker differences are
// the Features below, never skips of whole behaviours.
func TestRabbitMQ4(t *testing.T) {
	url := livetest.URL(t, "the RabbitMQ 4 conformance run")
	conformance.Run(t, conformance.Factory{
		Name: "rabbitmq4",
		New: func(t *testing.T) amqpactor.Connector {
			return amqpactor.Dial(url, amqpactor.WithDialect(amqpactor.RabbitMQ4))
		},
		Features: conformance.Features{
			DeliveryCountOnModified: true,  // quorum queues
			UndeliverableHereKeeps:  false, // RabbitMQ 4: undeliverable-here means do not requeue
			Transactions:            false, // go-amqp has no coordinator link
			FaultHooks:              false,
			UserID:                  []byte("guest"),
			DurableByDefault:        true, // RabbitMQ 4 stores every message as durable
			BrokerDeadLetters:       true, // quorum queues declared with x-dead-letter-*
		},
	})
}
