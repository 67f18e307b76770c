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
// and a new App must handle all 100.
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
			u := brokerURL(t)
			needRoot(t)
			q := liveQueue(t, u, "faults.default-durable."+c.name)
			mgmt(t, u, func(ctx context.Context, m *amqpwire.Management) {
				_, err := m.DeclareQueue(ctx, amqpwire.QueueSpec{Name: q.Name(), Type: amqpwire.Classic})
				require.NoError(t, err)
			})
			newApp := func() *amqpactor.App {
				log, _ := harness.NewLog(t)
				return amqpactor.New(c.dial(u), amqpactor.WithLogger(log),
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
					brokerCtl(t, "ctl", "start_app")
				}
			})
			brokerCtl(t, "ctl", "stop_app")
			brokerCtl(t, "ctl", "start_app")
			restored = true
			brokerCtl(t, "ctl", "await_startup")

			got := harness.NewTally()
			sub := newApp()
			_, err := sub.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
				got.Add(fmt.Sprint(m.MessageID))
				return nil
			}, amqpactor.WithClassicQueue())
			require.NoError(t, err)
			harness.StartApp(t, sub)
			require.Eventually(t, func() bool { return got.Distinct() == n }, 30*time.Second, 10*time.Millisecond,
				"every default message survived the restart: %d of %d, first missing %v", got.Distinct(), n, harness.First(got.Missing(all), 5))
			t.Logf("FIGURES %s: published=%d survived=%d", t.Name(), n, got.Distinct())
		})
	}
}
