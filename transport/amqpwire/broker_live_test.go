package amqpwire_test

import (
	"strings"
	"testing"

	"github.com/amqpactor/amqpactor/internal/livetest"
)

// TestLiveFeaturesNameTheBroker: the connection learns the broker's
// product and version from its open frame.
func TestLiveFeaturesNameTheBroker(t *testing.T) {
	v := livetest.RabbitMQ(t, liveURL(t))
	b := connect(t).Features().Broker
	rest, ok := strings.CutPrefix(b, "RabbitMQ ")
	expect(t, ok, "Features().Broker = %q, want RabbitMQ and its version", b)
	got, err := livetest.ParseVersion(rest)
	must(t, err, "the version in "+b)
	expect(t, got == v, "Features().Broker = %q; the broker is RabbitMQ %v", b, v)
}
