package amqp091_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The live tests run Apps: protoactor-go's dead-letter throttle outlives
// an actor system by its throttle period, as in the other packages.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}
