package faketransport_test

import (
	"context"
	"errors"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/test/kit/faketransport"
	"github.com/amqpactor/amqpactor/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSessionEndFailsEveryLinkWithASessionError(t *testing.T) {
	ctx := context.Background()
	var c faketransport.Connector
	c.FailDials(errors.New("refused"))
	_, err := c.Connect(ctx)
	require.EqualError(t, err, "refused")
	conn, err := c.Connect(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, c.Dials())
	sess, err := conn.NewSession(ctx)
	require.NoError(t, err)
	s, err := sess.NewSender(ctx, transport.SenderOptions{Address: address.Queue("q")})
	require.NoError(t, err)
	r, err := sess.NewReceiver(ctx, transport.ReceiverOptions{Address: address.Queue("q")})
	require.NoError(t, err)
	_, err = s.Send(ctx, amqp.NewMessage([]byte("x")), false)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { _, err := r.Receive(ctx); done <- err }()
	c.Last().Sessions()[0].End("amqp:internal-error", "bye")
	for _, err := range []error{<-done, func() error { _, err := s.Send(ctx, amqp.NewMessage(nil), false); return err }()} {
		var se *amqp.SessionError
		require.ErrorAs(t, err, &se)
		require.Equal(t, "bye", se.RemoteErr.Description)
		var le *transport.LinkError
		require.ErrorAs(t, err, &le)
	}
	_, err = sess.NewSender(ctx, transport.SenderOptions{Address: address.Queue("q")})
	var se *amqp.SessionError
	require.ErrorAs(t, err, &se)
	select {
	case <-conn.Done():
		t.Fatal("a session end closed the connection")
	default:
	}
	conn.(*faketransport.Conn).Drop("cut")
	<-conn.Done()
	var ce *amqp.ConnError
	require.ErrorAs(t, conn.Err(), &ce)
}
