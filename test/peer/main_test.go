// Package peer_test drives an App against a scripted AMQP 1.0 peer on a
// loopback TCP socket: the peer does what no broker does on purpose (answers
// nothing, answers late, sends numbers that cannot be honest), so the
// runtime's bounds are tested without a broker.
package peer_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}
