package amqp091_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/amqp091"
)

// TestLiveSessionLimit: the connection reports the channel-max negotiated
// in the tune, which the App plans its pool of connections by.
func TestLiveSessionLimit(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 session limit test")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := amqp091.New(amqp091.Config{URL: url}).Connect(ctx)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	n := conn.(transport.SessionLimit).MaxSessions()
	require.Positive(t, n)
	require.LessOrEqual(t, n, 65535)
	t.Logf("RabbitMQ's tune allows %d channels", n)
}
