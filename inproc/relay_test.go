package inproc

import (
	"context"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// kindOf returns what takes a Send's results and yields its outcome's kind.
func kindOf(t *testing.T) func(transport.Receipt, error) messages.OutcomeKind {
	return func(rc transport.Receipt, err error) messages.OutcomeKind {
		t.Helper()
		require.NoError(t, err)
		require.NotNil(t, rc)
		o, err := rc.Wait(context.Background())
		require.NoError(t, err)
		return o.Kind
	}
}

// TestRelayRoutesByTo: one link to the anonymous terminus reaches queues,
// topics and dynamic nodes by properties.to; a missing node releases that
// transfer only, and the link goes on.
func TestRelayRoutesByTo(t *testing.T) {
	e := newEnv(t)
	require.True(t, e.conn.Features().AnonymousRelay)
	q := e.sub(address.Queue("relay.q"), 10)
	top := e.sub(address.Topic("relay.t"), 10)
	dyn := e.receiver(transport.ReceiverOptions{Dynamic: true, Credit: 10}, 10)

	snd, err := e.sess.NewSender(context.Background(), transport.SenderOptions{})
	require.NoError(t, err)
	r, ok := snd.(transport.Relay)
	require.True(t, ok, "the anonymous terminus is a Relay")
	require.Equal(t, 1, e.b.Links(address.Address{}))
	ctx := context.Background()
	outcomeOf := kindOf(t)

	require.Equal(t, messages.Accepted, outcomeOf(r.SendTo(ctx, address.Queue("relay.q"), amqp.NewMessage([]byte("q1")), false)))
	require.Equal(t, messages.Accepted, outcomeOf(r.SendTo(ctx, address.Topic("relay.t"), amqp.NewMessage([]byte("t1")), false)))
	require.Equal(t, messages.Accepted, outcomeOf(r.SendTo(ctx, address.Raw(dyn.Address()), amqp.NewMessage([]byte("d1")), false)))
	// Missing nodes: released, one transfer at a time.
	require.Equal(t, messages.Released, outcomeOf(r.SendTo(ctx, address.Queue("relay.missing"), amqp.NewMessage([]byte("x")), false)))
	require.Equal(t, messages.Released, outcomeOf(r.SendTo(ctx, address.Raw("relay.missing"), amqp.NewMessage([]byte("x")), false)))
	require.False(t, e.b.HasQueue("relay.missing"), "a transfer never creates a queue")
	rc, err := r.SendTo(ctx, address.Queue("relay.missing"), amqp.NewMessage([]byte("x")), true)
	require.NoError(t, err)
	require.Nil(t, rc, "a settled transfer to a missing node is dropped")
	// The link is still good.
	require.Equal(t, messages.Accepted, outcomeOf(r.SendTo(ctx, address.Queue("relay.q"), amqp.NewMessage([]byte("q2")), false)))

	got := recv(t, q)
	require.Equal(t, "q1", string(got.GetData()))
	require.Equal(t, "relay.q", *got.Properties.To)
	require.Equal(t, "q2", recvBody(t, q))
	require.Equal(t, "t1", recvBody(t, top))
	require.Equal(t, "d1", recvBody(t, dyn))
	nothing(t, q)

	// Send names its node itself; without properties.to it is an error.
	to := "relay.q"
	m := amqp.NewMessage([]byte("q3"))
	m.Properties = &amqp.MessageProperties{To: &to}
	require.Equal(t, messages.Accepted, outcomeOf(snd.Send(ctx, m, false)))
	require.Equal(t, "q3", recvBody(t, q))
	_, err = snd.Send(ctx, amqp.NewMessage([]byte("nowhere")), false)
	require.ErrorIs(t, err, errNoTo)

	// SendTo does not change the caller's message.
	orig := amqp.NewMessage([]byte("q4"))
	_, err = r.SendTo(ctx, address.Queue("relay.q"), orig, false)
	require.NoError(t, err)
	require.Nil(t, orig.Properties)
	require.Nil(t, orig.Annotations)

	// RejectPublish applies to the node the transfer names.
	e.b.RejectPublish(address.Queue("relay.q"), "app:full", "full")
	require.Equal(t, messages.Rejected, outcomeOf(r.SendTo(ctx, address.Queue("relay.q"), amqp.NewMessage([]byte("x")), false)))
	e.b.ClearRejects()

	require.NoError(t, snd.Close(ctx))
	require.Equal(t, 0, e.b.Links(address.Address{}))
	_, err = r.SendTo(ctx, address.Queue("relay.q"), amqp.NewMessage([]byte("late")), false)
	var le *transport.LinkError
	require.ErrorAs(t, err, &le)
}

// TestRelayEndsWithSession: the anonymous terminus ends with its session
// and with DetachLinks of the zero address.
func TestRelayEndsWithSession(t *testing.T) {
	e := newEnv(t)
	snd, err := e.sess.NewSender(context.Background(), transport.SenderOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, e.b.DetachLinks(address.Address{}, "amqp:link:detach-forced", "test"))
	_, err = snd.(transport.Relay).SendTo(context.Background(), address.Queue("x"), amqp.NewMessage(nil), false)
	op, cond, _ := remoteCond(t, err)
	require.Equal(t, "send", op)
	require.Equal(t, amqp.ErrCond("amqp:link:detach-forced"), cond)

	snd, err = e.sess.NewSender(context.Background(), transport.SenderOptions{})
	require.NoError(t, err)
	require.NoError(t, e.sess.Close(context.Background()))
	_, err = snd.Send(context.Background(), amqp.NewMessage(nil), false)
	require.Error(t, err)
}

// TestWithoutAnonymousRelay: a broker without the relay says so and
// refuses the attach.
func TestWithoutAnonymousRelay(t *testing.T) {
	e := newEnv(t, WithoutAnonymousRelay())
	require.False(t, e.conn.Features().AnonymousRelay)
	_, err := e.sess.NewSender(context.Background(), transport.SenderOptions{})
	_, cond, _ := remoteCond(t, err)
	require.Equal(t, amqp.ErrCondNotImplemented, cond)
}
