package amqpwire_test

import (
	"strings"
	"testing"

	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
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

func TestBrokerOf(t *testing.T) {
	for _, c := range []struct {
		props map[string]any
		want  string
	}{
		{map[string]any{"product": "RabbitMQ", "version": "4.3.6", "platform": "Erlang/OTP"}, "RabbitMQ 4.3.6"},
		{map[string]any{"product": "apache-activemq-artemis"}, "apache-activemq-artemis"},
		{map[string]any{"version": "2.0"}, "2.0"},
		{map[string]any{"product": 42}, ""},
		{nil, ""},
	} {
		got := amqpwire.BrokerOf(c.props)
		expect(t, got == c.want, "BrokerOf(%v) = %q, want %q", c.props, got, c.want)
	}
}
