package inproc

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// wait bounds every blocking call a test expects to return.
const wait = 5 * time.Second

// quiet is how long a Receive that must find nothing waits. It is a bound on
// a negative check, never a synchronisation.
const quiet = 30 * time.Millisecond

var (
	accept   = messages.Outcome{Kind: messages.Accepted}
	release  = messages.Outcome{Kind: messages.Released}
	failed   = messages.Outcome{Kind: messages.Modified, DeliveryFailed: true}
	notHere  = messages.Outcome{Kind: messages.Modified, DeliveryFailed: true, UndeliverableHere: true}
	rejected = messages.Outcome{Kind: messages.Rejected, Condition: "app:bad", Description: "bad order"}
)

type env struct {
	t    *testing.T
	b    *Broker
	conn transport.Conn
	sess transport.Session
}

func newEnv(t *testing.T, opts ...Option) *env {
	t.Helper()
	b := New(opts...)
	ctx := context.Background()
	c, err := b.Connect(ctx)
	require.NoError(t, err)
	s, err := c.NewSession(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return &env{t: t, b: b, conn: c, sess: s}
}

func (e *env) receiver(o transport.ReceiverOptions, credit uint32) transport.Receiver {
	e.t.Helper()
	r, err := e.sess.NewReceiver(context.Background(), o)
	require.NoError(e.t, err)
	if credit > 0 {
		require.NoError(e.t, r.IssueCredit(credit))
	}
	return r
}

func (e *env) sub(a address.Address, credit uint32) transport.Receiver {
	e.t.Helper()
	return e.receiver(transport.ReceiverOptions{Address: a, Credit: credit}, credit)
}

func (e *env) sender(a address.Address) transport.Sender {
	e.t.Helper()
	s, err := e.sess.NewSender(context.Background(), transport.SenderOptions{Address: a})
	require.NoError(e.t, err)
	return s
}

// send publishes body unsettled and requires it accepted.
func (e *env) send(s transport.Sender, body string) {
	e.t.Helper()
	rc, err := s.Send(context.Background(), amqp.NewMessage([]byte(body)), false)
	require.NoError(e.t, err)
	require.NotNil(e.t, rc)
	o, err := rc.Wait(context.Background())
	require.NoError(e.t, err)
	require.Equal(e.t, messages.Accepted, o.Kind)
}

func (e *env) sendN(s transport.Sender, prefix string, n int) {
	e.t.Helper()
	for i := range n {
		e.send(s, prefix+strconv.Itoa(i))
	}
}

func recv(t *testing.T, r transport.Receiver) *amqp.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	m, err := r.Receive(ctx)
	require.NoError(t, err)
	return m
}

func recvBody(t *testing.T, r transport.Receiver) string {
	t.Helper()
	return string(recv(t, r).GetData())
}

// nothing requires that r has no transfer to give within quiet.
func nothing(t *testing.T, r transport.Receiver) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), quiet)
	defer cancel()
	m, err := r.Receive(ctx)
	if err == nil {
		t.Fatalf("unexpected transfer %q", m.GetData())
	}
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func settle(t *testing.T, r transport.Receiver, m *amqp.Message, o messages.Outcome) {
	t.Helper()
	require.NoError(t, r.Settle(context.Background(), m, o))
}

// remoteCond extracts the condition a peer ended a link or connection with.
func remoteCond(t *testing.T, err error) (op string, cond amqp.ErrCond, desc string) {
	t.Helper()
	var le *transport.LinkError
	require.ErrorAs(t, err, &le)
	var ae *amqp.Error
	require.True(t, errors.As(err, &ae), "no *amqp.Error in %v", err)
	return le.Op, ae.Condition, ae.Description
}
