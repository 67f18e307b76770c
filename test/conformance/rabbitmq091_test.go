package conformance_test

import (
	"testing"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/conformance"

	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// TestRabbitMQ091 runs the suite on a live RabbitMQ 4 over AMQP 0-9-1
// (Dial091, same AMQP_URL: RabbitMQ serves both protocols on one
// listener). Queues are quorum queues, as on AMQP 1.0.
func TestRabbitMQ091(t *testing.T) {
	url := livetest.URL(t, "the RabbitMQ 4 AMQP 0-9-1 conformance run")
	v := livetest.RabbitMQ(t, url)
	t.Logf("RabbitMQ %v", v)
	conformance.Run(t, conformance.Factory{
		Name: "rabbitmq091",
		New: func(t *testing.T) amqpactor.Connector {
			return amqpactor.Dial091(url)
		},
		Features: conformance.Features{
			DeliveryCountOnModified: true,  // quorum queues: x-delivery-count
			UndeliverableHereKeeps:  false, // mapped to basic.nack without requeue, as RabbitMQ 4 does on 1.0
			Transactions:            true,  // tx.select
			FaultHooks:              false,
			UserID:                  []byte("guest"),
			BrokerDeadLetters:       true, // quorum queues declared with x-dead-letter-*
			// RabbitMQ 4.0's quorum queues count every 0-9-1 return; 4.3
			// no longer counts basic.nack with requeue, which is released.
			ReleaseCounts: !v.AtLeast(4, 3),
			AMQP091:       true,
			BindingKeys:   true, // the subject is the routing key
		},
	})
}
