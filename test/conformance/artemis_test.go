package conformance_test

import (
	"testing"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/conformance"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// TestArtemis runs the suite on a live ActiveMQ Artemis (ARTEMIS_URL), the
// broker whose address model DESIGN.md describes, with the default dialect.
func TestArtemis(t *testing.T) {
	url := livetest.ArtemisURL(t, "the Artemis conformance run")
	conformance.Run(t, conformance.Factory{
		Name: "artemis",
		New: func(t *testing.T) amqpactor.Connector {
			return amqpactor.Dial(url, amqpactor.WithDialect(amqpactor.Artemis))
		},
		Features: conformance.Features{
			DeliveryCountOnModified: true,
			UndeliverableHereKeeps:  true,
			Transactions:            false, // go-amqp has no coordinator link
			FirstAcquirerAsSent:     true,
		},
	})
}
