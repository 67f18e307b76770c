package amqpactor_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// RetryPolicy.BrokerDelay is the broker's delayed retry: Subscribe refuses
// it where it cannot be (another transport, Backoff beside it, a classic
// queue, at-most-once, a queue argument of its own set twice) with an error
// saying why, and takes it on RabbitMQ 4 over AMQP 1.0, whose release is
// checked at attach (test/live).
func TestBrokerDelayChecked(t *testing.T) {
	h := func(context.Context, *amqpactor.Message) error { return nil }
	d := amqpactor.RetryPolicy{BrokerDelay: time.Second}

	_, err := amqpactor.New(inproc.New()).Subscribe(amqpactor.Queue("q"), h, amqpactor.WithRetry(d))
	require.ErrorIs(t, err, amqpactor.ErrNotSupported)
	require.ErrorContains(t, err, "BrokerDelay")

	rabbit := amqpactor.New(amqpactor.Dial("amqp://127.0.0.1:1/", amqpactor.WithDialect(amqpactor.RabbitMQ4)))
	for name, c := range map[string]struct {
		opts []amqpactor.SubscribeOption
		want string
	}{
		"backoff":  {[]amqpactor.SubscribeOption{amqpactor.WithRetry(amqpactor.RetryPolicy{BrokerDelay: time.Second, Backoff: time.Second})}, "with Backoff"},
		"negative": {[]amqpactor.SubscribeOption{amqpactor.WithRetry(amqpactor.RetryPolicy{BrokerDelay: -time.Second})}, "must be positive"},
		"max-only": {[]amqpactor.SubscribeOption{amqpactor.WithRetry(amqpactor.RetryPolicy{MaxBrokerDelay: time.Second})}, "must be positive"},
		"classic":  {[]amqpactor.SubscribeOption{amqpactor.WithRetry(d), amqpactor.WithClassicQueue()}, "classic queue"},
		"settled":  {[]amqpactor.SubscribeOption{amqpactor.WithRetry(d), amqpactor.AtMostOnce()}, "at-most-once"},
		"args": {[]amqpactor.SubscribeOption{amqpactor.WithRetry(d),
			amqpactor.WithQueueArguments(map[string]any{"x-delayed-retry-min": 5})}, `"x-delayed-retry-min"`},
	} {
		_, err := rabbit.Subscribe(amqpactor.Queue("q-"+name), h, c.opts...)
		require.ErrorContains(t, err, c.want, name)
	}
	_, err = rabbit.Subscribe(amqpactor.Queue("ok"), h, amqpactor.WithRetry(d))
	require.NoError(t, err)
}
