package inproc

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport"
)

// sessionCond requires that err reports a session the peer ended with cond.
func sessionCond(t *testing.T, err error, op string, cond amqp.ErrCond, desc string) {
	t.Helper()
	var le *transport.LinkError
	require.ErrorAs(t, err, &le)
	require.Equal(t, op, le.Op)
	var se *amqp.SessionError
	require.ErrorAs(t, err, &se, "not a session error: %v", err)
	require.NotNil(t, se.RemoteErr)
	require.Equal(t, cond, se.RemoteErr.Condition)
	require.Equal(t, desc, se.RemoteErr.Description)
}

func TestEndSessionsOnAnAddressEndsEveryLinkOfThoseSessions(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := address.Queue("orders")
	r := e.sub(a, 5)
	s := e.sender(a)
	onSame := e.sender(address.Queue("elsewhere")) // same session, other address
	e.sendN(s, "m", 2)
	m := recv(t, r) // unsettled when the session ends

	// a second session on the same connection, with nothing on a
	other, err := e.conn.NewSession(ctx)
	require.NoError(t, err)
	os, err := other.NewSender(ctx, transport.SenderOptions{Address: address.Queue("elsewhere")})
	require.NoError(t, err)

	require.Equal(t, 1, e.b.EndSessions(a, "amqp:session:errant-link", "ended"))
	require.Equal(t, 0, e.b.Links(a))

	_, err = r.Receive(ctx)
	sessionCond(t, err, "receive", amqp.ErrCondErrantLink, "ended")
	_, err = s.Send(ctx, amqp.NewMessage([]byte("x")), false)
	sessionCond(t, err, "send", amqp.ErrCondErrantLink, "ended")
	_, err = onSame.Send(ctx, amqp.NewMessage([]byte("x")), false)
	sessionCond(t, err, "send", amqp.ErrCondErrantLink, "ended")
	_, err = e.sess.NewSender(ctx, transport.SenderOptions{Address: a})
	sessionCond(t, err, "attach", amqp.ErrCondErrantLink, "ended")

	// the unsettled and the buffered delivery are back
	require.ErrorIs(t, r.Settle(ctx, m, accept), ErrLinkEnded)
	require.Equal(t, 2, e.b.QueueDepth("orders"))

	// the other session and the connection go on; a new session works
	e.send(os, "still")
	select {
	case <-e.conn.Done():
		t.Fatal("EndSessions ended the connection")
	default:
	}
	ns, err := e.conn.NewSession(ctx)
	require.NoError(t, err)
	r2, err := ns.NewReceiver(ctx, transport.ReceiverOptions{Address: a, Credit: 5})
	require.NoError(t, err)
	require.NoError(t, r2.IssueCredit(5))
	got := recv(t, r2)
	require.Equal(t, "m0", string(got.GetData()))
	require.False(t, got.Header.FirstAcquirer)
	require.Equal(t, "m1", recvBody(t, r2))

	// nothing attached there any more but r2's session
	require.Equal(t, 1, e.b.EndSessions(a, "x", "y"))
	require.Equal(t, 0, e.b.EndSessions(a, "x", "y"))
}

func TestEndSessionsZeroAddressEndsAllAndABlockedReceiveReturns(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	blocked := e.sub(address.Topic("events"), 0)
	errc := make(chan error, 1)
	go func() {
		_, err := blocked.Receive(ctx)
		errc <- err
	}()
	c2, err := e.b.Connect(ctx)
	require.NoError(t, err)
	defer func() { _ = c2.Close(ctx) }()
	_, err = c2.NewSession(ctx)
	require.NoError(t, err)
	_, err = c2.NewSession(ctx)
	require.NoError(t, err)

	require.Equal(t, 3, e.b.EndSessions(address.Address{}, "amqp:internal-error", "all"))
	select {
	case err := <-errc:
		sessionCond(t, err, "receive", amqp.ErrCondInternalError, "all")
	case <-time.After(wait):
		t.Fatal("a blocked Receive did not return on EndSessions")
	}
	require.Equal(t, 0, e.b.EndSessions(address.Address{}, "x", "y"))
	// a session closed after it was ended is not counted or harmed
	require.NoError(t, e.sess.Close(ctx))
}
