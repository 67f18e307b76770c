package peer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// TestDurableSubscriptionAsksForADurableSource: a named App's topic
// subscription on the Artemis dialect attaches with a durable source
// (durable unsettled-state, expiry-policy never): the broker's node is what
// must outlive the link, not the client's own target.
func TestDurableSubscriptionAsksForADurableSource(t *testing.T) {
	noLeaks(t)
	sources := make(chan []byte, 4)
	b := newBroker(t, script{attach: func(c *peerConn, ch uint16, a attach) {
		if a.receiver {
			sources <- a.source
		}
		c.answerAttach(ch, a)
	}})
	app := amqpactor.New(amqpactor.Dial(b.url()), amqpactor.WithName("billing"))
	_, err := app.Subscribe(amqpactor.Topic("events"), func(context.Context, *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()

	var src []byte
	select {
	case src = <-sources:
	case <-time.After(hangBound):
		t.Fatal("the subscription never attached")
	}
	require.NotNil(t, src, "the receiver's attach has no source")
	f := fields(src)
	require.GreaterOrEqual(t, len(f), 3, "source fields")
	durable, ok := uintValue(f[1])
	require.True(t, ok, "source durable % x", f[1])
	require.EqualValues(t, 2, durable, "source durable: unsettled-state")
	require.Equal(t, append([]byte{0xa3, 5}, "never"...), f[2], "source expiry-policy: never")
}
