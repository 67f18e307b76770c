package conformance_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/test/conformance"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor's dead-letter log throttle: a timer goroutine that the
		// first dead letter of an actor system starts and that ends by
		// itself one second later, whether or not the system was shut down.
		// Late dispositions (to a receiver that has stopped) are dead
		// letters by design, so the last test may leave one behind.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// TestInproc runs the suite on the in-process broker: a fresh broker per
// test, so nothing needs unique names, though the suite makes them anyway.
func TestInproc(t *testing.T) {
	conformance.Run(t, conformance.Factory{
		Name: "inproc",
		New:  func(t *testing.T) amqpactor.Connector { return inproc.New() },
		Features: conformance.Features{
			DeliveryCountOnModified: true,
			UndeliverableHereKeeps:  true,
			Transactions:            true,
			FaultHooks:              true,
			BindingKeys:             true,
			Streams:                 true,
			StreamPropertyFilters:   true,
			StreamSQL:               true,
		},
	})
}
