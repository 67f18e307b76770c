package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/harness"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// Durable unless asked otherwise (issue 28): RabbitMQ 4.2 and later store a
// message without a header as transient, so a Message with every field at
// its zero must still go out saying durable, or a classic queue loses it
// when the node restarts. Each connector publishes 100 default messages to
// a classic queue nobody consumes, the node restarts (stop_app, start_app),
// and a new App must handle all 100. Artemis journals only what says
// durable, so the same holds there across a kill -9 of its JVM.
func TestLiveDefaultMessagesSurviveRestart(t *testing.T) {
	for _, c := range []struct {
		name string
		dial func(u string) amqpactor.Connector
	}{
		{"amqp10", func(u string) amqpactor.Connector {
			return amqpactor.Dial(u, amqpactor.WithDialect(amqpactor.RabbitMQ4))
		}},
		{"amqp091", func(u string) amqpactor.Connector { return amqpactor.Dial091(u) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := rabbitMQRestartable(t)
			defaultsSurviveRestart(t, b, c.dial, "faults.default-durable."+c.name,
				func(ctx context.Context, conn *amqpwire.Conn, q string) error {
					_, err := conn.Management().DeclareQueue(ctx, amqpwire.QueueSpec{Name: q, Type: amqpwire.Classic})
					return err
				},
				func(t *testing.T) { b.ctl(t, "ctl", "stop_app") },
				func(t *testing.T) { b.ctl(t, "ctl", "start_app"); b.ctl(t, "ctl", "await_startup") },
				amqpactor.WithClassicQueue())
		})
	}
	t.Run("artemis", func(t *testing.T) {
		b := artemisRestartable(t)
		defaultsSurviveRestart(t, b, func(u string) amqpactor.Connector { return amqpactor.Dial(u) }, "faults.default-durable",
			b.declareQueue, func(t *testing.T) { b.ctl(t, "kill9") }, func(t *testing.T) { b.ctl(t, "start") })
	})
}

// defaultsSurviveRestart publishes 100 default messages through dial to the
// queue declare made on b, takes the broker down and up, and handles all
// 100 with a new App subscribed with opts. up also runs when the test ends
// after down and before up.
func defaultsSurviveRestart(t *testing.T, b liveBroker, dial func(u string) amqpactor.Connector, prefix string,
	declare func(ctx context.Context, c *amqpwire.Conn, q string) error, down, up func(t *testing.T), opts ...amqpactor.SubscribeOption) {
	q := b.queue(t, prefix)
	require.NoError(t, b.admin(30*time.Second, func(ctx context.Context, c *amqpwire.Conn) error {
		return declare(ctx, c, q.Name())
	}))
	newApp := func() *amqpactor.App {
		log, _ := harness.NewLog(t)
		return amqpactor.New(dial(b.url), amqpactor.WithLogger(log),
			amqpactor.WithBackoff(backoffInitial, backoffMax), amqpactor.WithCloseTimeout(3*time.Second))
	}

	const n = 100
	pub := newApp()
	harness.StartApp(t, pub)
	ctx := harness.Bound(t, 2*time.Minute)
	all := harness.IDs(harness.Unique("d"), n)
	for _, id := range all {
		require.NoError(t, pub.Publish(ctx, q, &amqpactor.Message{MessageID: id, Body: []byte(id)}))
	}
	harness.StopApp(t, pub)

	restored := false
	t.Cleanup(func() {
		if !restored {
			up(t)
		}
	})
	down(t)
	up(t)
	restored = true

	got := harness.NewTally()
	sub := newApp()
	_, err := sub.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		got.Add(fmt.Sprint(m.MessageID))
		return nil
	}, opts...)
	require.NoError(t, err)
	harness.StartApp(t, sub)
	require.Eventually(t, func() bool { return got.Distinct() == n }, 30*time.Second, 10*time.Millisecond,
		"every default message survived the restart: %d of %d, first missing %v", got.Distinct(), n, harness.First(got.Missing(all), 5))
	t.Logf("FIGURES %s: published=%d survived=%d", t.Name(), n, got.Distinct())
}
