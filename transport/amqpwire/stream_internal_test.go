package amqpwire

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport"
)

// TestSQLRefusedByAttach: a broker that leaves the SQL filter out of its
// attach (RabbitMQ does, for an expression it cannot evaluate) fails the
// receiver with an error naming the address and the expression, wrapping
// ErrNotSupported; a receiver without one is not affected.
func TestSQLRefusedByAttach(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	done := make(chan error, 1)
	go func() {
		defer peerDone(done)
		p := &fakePeer{conn: server}
		p.handshake(false)
		p.answerClose()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, sess := openFake(ctx, t, client)
	f := address.StreamFilter{SQL: "kind = 'order'"}
	rcv, err := sess.NewReceiver(ctx, "/queues/q", &amqp.ReceiverOptions{Credit: 10,
		Filters: streamFilters(address.StreamFirst(), f)})
	require.NoError(t, err)

	st := address.Stream("q")
	require.NoError(t, sqlRefused(transport.ReceiverOptions{Address: st}, rcv), "no SQL asked for")
	err = sqlRefused(transport.ReceiverOptions{Address: st, StreamFilter: f}, rcv)
	require.ErrorIs(t, err, transport.ErrNotSupported)
	require.ErrorContains(t, err, "stream:q")
	require.ErrorContains(t, err, "kind = 'order'")
	_ = conn.Close()
	<-done
}
