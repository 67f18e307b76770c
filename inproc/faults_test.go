package inproc

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

func TestDetachLinksEndsLinksWithCondition(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := address.Queue("orders")
	r := e.sub(a, 5)
	s := e.sender(a)
	other := e.sub(address.Queue("other"), 1)
	e.sendN(s, "m", 2)
	m := recv(t, r) // unsettled when the detach comes

	blocked := e.sub(a, 0)
	errc := make(chan error, 1)
	go func() {
		_, err := blocked.Receive(ctx)
		errc <- err
	}()

	require.Equal(t, 3, e.b.DetachLinks(a, "amqp:resource-deleted", "queue deleted"))
	require.Equal(t, 0, e.b.Links(a))

	_, err := r.Receive(ctx)
	op, cond, desc := remoteCond(t, err)
	require.Equal(t, "receive", op)
	require.Equal(t, amqp.ErrCondResourceDeleted, cond)
	require.Equal(t, "queue deleted", desc)
	var ale *amqp.LinkError
	require.ErrorAs(t, err, &ale)
	require.Equal(t, amqp.ErrCondResourceDeleted, ale.RemoteErr.Condition)

	select {
	case err := <-errc:
		_, cond, _ = remoteCond(t, err)
		require.Equal(t, amqp.ErrCondResourceDeleted, cond)
	case <-time.After(wait):
		t.Fatal("a blocked Receive did not return on detach")
	}

	_, err = s.Send(ctx, amqp.NewMessage([]byte("x")), false)
	op, cond, _ = remoteCond(t, err)
	require.Equal(t, "send", op)
	require.Equal(t, amqp.ErrCondResourceDeleted, cond)

	// the unsettled and the buffered delivery are back, and a late
	// settle changes nothing
	require.ErrorIs(t, r.Settle(ctx, m, accept), ErrLinkEnded)
	require.Equal(t, 2, e.b.QueueDepth("orders"))

	// other addresses are untouched
	e.send(e.sender(address.Queue("other")), "still")
	require.Equal(t, "still", recvBody(t, other))

	// re-attaching works
	r2 := e.sub(a, 5)
	got := recv(t, r2)
	require.Equal(t, "m0", string(got.GetData()))
	require.False(t, got.Header.FirstAcquirer)
	require.Equal(t, "m1", recvBody(t, r2))
}

func TestDetachLinksOfTopicAndDynamic(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tr := e.sub(address.Topic("events"), 1)
	dyn := e.receiver(transport.ReceiverOptions{Dynamic: true}, 1)
	require.Equal(t, 1, e.b.DetachLinks(address.Topic("events"), "amqp:link:detach-forced", "bye"))
	require.Equal(t, 0, e.b.Subscriptions("events"))
	_, err := tr.Receive(ctx)
	_, cond, _ := remoteCond(t, err)
	require.Equal(t, amqp.ErrCondDetachForced, cond)

	name := dyn.Address()
	require.Equal(t, 1, e.b.DetachLinks(address.Raw(name), "amqp:link:detach-forced", "bye"))
	require.False(t, e.b.HasQueue(name))
	require.Equal(t, 0, e.b.DetachLinks(address.Queue("none"), "x", "y"))
}

func TestDropConnections(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := address.Queue("drop")
	r := e.sub(a, 5)
	s := e.sender(a)
	e.send(s, "m0")
	m := recv(t, r)

	c2, err := e.b.Connect(ctx)
	require.NoError(t, err)

	require.Equal(t, 2, e.b.DropConnections(errors.New("network unplugged")))
	for _, c := range []transport.Conn{e.conn, c2} {
		select {
		case <-c.Done():
		default:
			t.Fatal("Done not closed")
		}
		var ce *amqp.ConnError
		require.ErrorAs(t, c.Err(), &ce)
		require.Equal(t, amqp.ErrCondConnectionForced, ce.RemoteErr.Condition)
		require.Equal(t, "network unplugged", ce.RemoteErr.Description)
	}

	_, err = r.Receive(ctx)
	var le *transport.LinkError
	require.ErrorAs(t, err, &le)
	var ce *amqp.ConnError
	require.ErrorAs(t, err, &ce)
	require.NotNil(t, ce.RemoteErr)

	_, err = s.Send(ctx, amqp.NewMessage(nil), false)
	require.ErrorAs(t, err, &le)
	require.ErrorAs(t, err, &ce)

	require.ErrorIs(t, r.Settle(ctx, m, accept), ErrLinkEnded)
	require.Equal(t, 1, e.b.QueueDepth("drop"))
	require.Equal(t, 0, e.b.Conns())
	_, err = e.conn.NewSession(ctx)
	require.ErrorAs(t, err, &ce)

	// reconnecting works, and the message comes back
	e2 := newEnvOn(t, e.b)
	got := recv(t, e2.sub(a, 1))
	require.Equal(t, "m0", string(got.GetData()))
	require.False(t, got.Header.FirstAcquirer)
}

func TestDropConnectionsKeepsAnAMQPError(t *testing.T) {
	e := newEnv(t)
	e.b.DropConnections(&amqp.Error{Condition: amqp.ErrCondFramingError, Description: "bad frame"})
	var ce *amqp.ConnError
	require.ErrorAs(t, e.conn.Err(), &ce)
	require.Equal(t, amqp.ErrCondFramingError, ce.RemoteErr.Condition)
	e2 := newEnvOn(t, e.b)
	e2.b.DropConnections(nil)
	require.ErrorAs(t, e2.conn.Err(), &ce)
	require.Equal(t, amqp.ErrCondConnectionForced, ce.RemoteErr.Condition)
}

func newEnvOn(t *testing.T, b *Broker) *env {
	t.Helper()
	ctx := context.Background()
	c, err := b.Connect(ctx)
	require.NoError(t, err)
	s, err := c.NewSession(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return &env{t: t, b: b, conn: c, sess: s}
}

func TestRefuseAttach(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := address.Queue("secret")
	e.b.RefuseAttach(a, "amqp:unauthorized-access", "no permission")

	_, err := e.sess.NewReceiver(ctx, transport.ReceiverOptions{Address: a})
	var le *transport.LinkError
	require.ErrorAs(t, err, &le)
	require.Equal(t, "attach", le.Op)
	require.Equal(t, "queue:secret", le.Address)
	var ale *amqp.LinkError
	require.ErrorAs(t, err, &ale)
	require.Equal(t, amqp.ErrCondUnauthorizedAccess, ale.RemoteErr.Condition)
	require.Equal(t, "no permission", ale.RemoteErr.Description)
	require.False(t, e.b.HasQueue("secret"), "a refused attach creates nothing")

	_, err = e.sess.NewSender(ctx, transport.SenderOptions{Address: a})
	op, cond, _ := remoteCond(t, err)
	require.Equal(t, "attach", op)
	require.Equal(t, amqp.ErrCondUnauthorizedAccess, cond)

	// only that address
	e.sub(address.Queue("public"), 0)

	e.b.ClearRefusals()
	e.sub(a, 0)
}

func TestRejectPublish(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := address.Queue("full")
	e.b.DeclareQueue("full")
	s := e.sender(a)
	e.b.RejectPublish(a, "amqp:resource-limit-exceeded", "queue full")

	rc, err := s.Send(ctx, amqp.NewMessage([]byte("x")), false)
	require.NoError(t, err)
	o, err := rc.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, messages.Outcome{Kind: messages.Rejected, Condition: "amqp:resource-limit-exceeded", Description: "queue full"}, o)

	rc, err = s.Send(ctx, amqp.NewMessage([]byte("y")), true)
	require.NoError(t, err)
	require.Nil(t, rc)
	require.Equal(t, 0, e.b.QueueDepth("full"))

	e.b.ClearRejects()
	e.send(s, "z")
	require.Equal(t, 1, e.b.QueueDepth("full"))
}

func TestFaultHooksAreSafeConcurrently(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("chaos")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				r, err := e.sess.NewReceiver(context.Background(), transport.ReceiverOptions{Address: a})
				if err == nil {
					_ = r.IssueCredit(1)
				}
				s, err := e.sess.NewSender(context.Background(), transport.SenderOptions{Address: a})
				if err == nil {
					_, _ = s.Send(context.Background(), amqp.NewMessage([]byte("m")), true)
				}
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			e.b.DetachLinks(a, "amqp:link:detach-forced", "chaos")
			e.b.RefuseAttach(a, "amqp:not-found", "chaos")
			e.b.ClearRefusals()
			e.b.RejectPublish(a, "amqp:not-allowed", "chaos")
			e.b.ClearRejects()
			_ = e.b.QueueDepth("chaos") + e.b.Unsettled("chaos") + e.b.Links(a)
		}
	})
	wg.Wait()
	e.b.DetachLinks(a, "amqp:link:detach-forced", "end")
	require.Equal(t, 0, e.b.Links(a))
	require.Equal(t, 0, e.b.Unsettled("chaos"))
}
