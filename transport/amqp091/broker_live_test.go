package amqp091_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// TestLiveFeaturesNameTheBroker: the connection learns the broker's
// product and version from its connection.start.
func TestLiveFeaturesNameTheBroker(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 broker version test")
	v := livetest.RabbitMQ(t, url)
	b := connect(t, url).Features().Broker
	rest, ok := strings.CutPrefix(b, "RabbitMQ ")
	require.True(t, ok, "Features().Broker = %q, want RabbitMQ and its version", b)
	got, err := livetest.ParseVersion(rest)
	require.NoError(t, err)
	require.Equal(t, v, got, "Features().Broker = %q", b)
}
