package peer_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// TestServiceBusUndeliverableDeadLetters: on the Service Bus dialect a
// handler's Undeliverable settles the delivery as rejected with
// com.microsoft:dead-letter and the reason and description, never as
// modified{undeliverable-here}, which Service Bus takes for defer (the
// message hidden until fetched by its sequence number).
func TestServiceBusUndeliverableDeadLetters(t *testing.T) {
	noLeaks(t)
	var once sync.Once
	states := make(chan []byte, 1)
	b := newBroker(t, script{
		flow: func(c *peerConn, ch uint16, body []byte) {
			f := fields(body)
			if len(f) < 7 {
				return
			}
			handle, ok1 := uintValue(f[4])
			credit, ok2 := uintValue(f[6])
			if !ok1 || !ok2 || credit == 0 {
				return
			}
			// One delivery on the client's receiver link, once it grants credit.
			once.Do(func() {
				payload := append([]byte{0x00, 0x53, 0x75, 0xa0, 5}, "order"...)
				c.write(frame(0, ch, append(performative(0x14, encUint(handle), encUint(0), []byte{0xa0, 1, 0}, encUint(0), encBool(false)), payload...)))
			})
		},
		disposition: func(c *peerConn, ch uint16, body []byte) {
			if f := fields(body); len(f) > 4 {
				select {
				case states <- f[4]:
				default:
				}
			}
		},
	})
	app := amqpactor.New(amqpactor.Dial(b.url(), amqpactor.WithDialect(amqpactor.ServiceBus)))
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(context.Context, *amqpactor.Message) error {
		return amqpactor.Undeliverable(errors.New("no such tenant"))
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()

	var state []byte
	select {
	case state = <-states:
	case <-time.After(hangBound):
		t.Fatal("the delivery was never settled")
	}
	require.GreaterOrEqual(t, len(state), 3, "disposition state % x", state)
	require.Equal(t, []byte{0x00, 0x53, 0x25}, state[:3], "the outcome is rejected (0x25), not modified (0x27): % x", state)
	for _, want := range []string{"com.microsoft:dead-letter", "DeadLetterReason", "undeliverable", "DeadLetterErrorDescription", "no such tenant"} {
		require.True(t, bytes.Contains(state, []byte(want)), "the rejection carries %q: %q", want, state)
	}
}
