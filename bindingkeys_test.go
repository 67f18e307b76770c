package amqpactor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// TestTopicBindingKeysShare: three subscriptions bound with "orders.*.eu",
// "orders.#" and "#.us" each get exactly their share of 1,000 messages
// published to the topic with mixed subjects, in-process.
func TestTopicBindingKeysShare(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	app := amqpactor.New(inproc.New(), amqpactor.WithName("keys"))
	var mu sync.Mutex
	got := map[string]map[string]int{}
	sub := func(who string, keys ...string) {
		_, err := app.Subscribe(amqpactor.Topic("orders"), func(ctx context.Context, m *amqpactor.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if got[who] == nil {
				got[who] = map[string]int{}
			}
			got[who][m.Subject]++
			return nil
		}, amqpactor.WithBindingKeys(keys...), amqpactor.WithSubscriptionName(who))
		require.NoError(t, err)
	}
	sub("eu", "orders.*.eu")
	sub("orders", "orders.#")
	sub("us", "#.us")
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()

	subjects := []string{"orders.new.eu", "orders.new.us", "orders.eu", "orders", "payments.us", "us", "payments.eu", "orders.a.b.eu", ""}
	want := map[string]map[string]int{
		"eu":     {"orders.new.eu": 0},
		"orders": {"orders.new.eu": 0, "orders.new.us": 0, "orders.eu": 0, "orders": 0, "orders.a.b.eu": 0},
		"us":     {"orders.new.us": 0, "payments.us": 0, "us": 0},
	}
	total := map[string]int{}
	for i := range 1000 {
		s := subjects[i%len(subjects)]
		require.NoError(t, app.Publish(ctx, amqpactor.Topic("orders"), &amqpactor.Message{Subject: s, Body: []byte(fmt.Sprint(i))}))
		for who := range want {
			if _, ok := want[who][s]; ok {
				want[who][s]++
				total[who]++
			}
		}
	}
	require.Equal(t, map[string]int{"eu": 112, "orders": 556, "us": 333}, total, "the shares this test expects")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for who := range want {
			n := 0
			for _, c := range got[who] {
				n += c
			}
			if n < total[who] {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, app.Stop(ctx))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, want, got)
}

// TestTopicBindingKeysInvalid: a pattern that is not valid, keys on a queue,
// and keys on a broker that cannot bind by pattern fail at Subscribe, before
// Start, naming the address.
func TestTopicBindingKeysInvalid(t *testing.T) {
	h := func(context.Context, *amqpactor.Message) error { return nil }
	app := amqpactor.New(inproc.New())
	for _, keys := range [][]string{{""}, {"orders..eu"}, {"ord*.eu"}, {"orders.#x"}} {
		_, err := app.Subscribe(amqpactor.Topic("events"), h, amqpactor.WithBindingKeys(keys...))
		var ae *amqpactor.AddressError
		require.True(t, errors.As(err, &ae), "keys %q: %v", keys, err)
		require.ErrorContains(t, err, "topic:events")
	}
	_, err := app.Subscribe(amqpactor.Queue("orders"), h, amqpactor.WithBindingKeys("a.*"))
	require.ErrorContains(t, err, "queue:orders")
	_, err = app.Subscribe(amqpactor.Topic("events"), h, amqpactor.WithBindingKeys("orders.*.eu", "#.us"))
	require.NoError(t, err)

	artemis := amqpactor.New(amqpactor.Dial("amqp://localhost:1", amqpactor.WithDialect(amqpactor.Artemis)))
	_, err = artemis.Subscribe(amqpactor.Topic("events"), h, amqpactor.WithBindingKeys("orders.#"))
	require.ErrorContains(t, err, "topic:events")
	require.ErrorContains(t, err, "Artemis")
	_, err = artemis.Subscribe(amqpactor.Topic("events"), h, amqpactor.WithBindingKeys("#"))
	require.NoError(t, err, `"#" is every message, which Artemis gives anyway`)
}
