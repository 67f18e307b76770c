package connection_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/connection"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/test/kit/faketransport"
	"github.com/amqpactor/amqpactor/transport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

const tick = time.Millisecond

// start spawns a connection actor on c and returns it with the answer of
// its first dial; the cleanup stops it.
func start(t *testing.T, sys *actor.ActorSystem, env *actors.Env, c transport.Connector) (*actor.PID, connection.Started) {
	t.Helper()
	started := make(chan connection.Started, 1)
	pid := sys.Root.Spawn(connection.New(env, c, started))
	t.Cleanup(func() { _ = sys.Root.PoisonFuture(pid).Wait() })
	select {
	case s := <-started:
		return pid, s
	case <-time.After(faketransport.Bound):
		t.Fatal("the first dial was never answered")
		return nil, connection.Started{}
	}
}

func node(t *testing.T, sys *actor.ActorSystem, pid *actor.PID) *protocol.Node {
	return faketransport.Describe(t, sys, pid).Node
}

func TestFirstDialFailureEndsStartWithoutRetrying(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	c := &faketransport.Connector{}
	refused := errors.New("connection refused")
	c.FailDials(refused)
	pid, s := start(t, sys, env, c)
	require.ErrorIs(t, s.Err, refused, "Start learns why the first dial failed")
	n := node(t, sys, pid)
	require.Equal(t, protocol.StateDetached, n.State)
	require.Contains(t, n.LastError, "connection refused")
	// The App gives up on a connection whose first dial failed: no retry
	// is ever scheduled (the backoff is a few ms, so one would show).
	require.Never(t, func() bool { return c.Dials() > 1 }, 100*time.Millisecond, tick, "a failed first dial was retried")
}

func TestReconnectsWithBackoffWhenTheConnectionIsLost(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	c := &faketransport.Connector{Features: transport.Features{Transactions: true}}
	pid, s := start(t, sys, env, c)
	require.NoError(t, s.Err)
	require.NotNil(t, s.Children.Publisher)
	require.Equal(t, 1, c.Dials())
	first := c.Last()
	require.Eventually(t, func() bool { return node(t, sys, s.Children.Txn).State == protocol.StateAttached }, faketransport.Bound, tick,
		"the children hear ConnUp")

	// The connection is lost; the next three dials fail, the fourth works.
	c.FailDials(errors.New("refused 1"), errors.New("refused 2"), errors.New("refused 3"))
	first.Drop("network cut")
	require.Eventually(t, func() bool { return c.Dials() == 5 && node(t, sys, pid).State == protocol.StateAttached },
		faketransport.Bound, tick, "reconnected after three failed dials")
	n := node(t, sys, pid)
	require.Equal(t, 1, n.Restarts, "one lost connection")
	require.Contains(t, n.LastError, "refused 3", "the last failed dial is the last error")
	second := c.Last()
	require.NotSame(t, first, second)
	require.False(t, second.Closed())

	// The children are on the new connection: a transaction begins on it.
	reply := make(chan protocol.BeginResult, 1)
	c.Begin = func(context.Context) (transport.Txn, error) { return nil, errors.New("no coordinator here") }
	sys.Root.Send(s.Children.Txn, &protocol.Begin{Ctx: context.Background(), Reply: reply})
	select {
	case r := <-reply:
		require.ErrorContains(t, r.Err, "no coordinator here", "Begin reached the new connection")
	case <-time.After(faketransport.Bound):
		t.Fatal("Begin never answered")
	}

	// Lost again: reconnects again, counting a second restart.
	second.Drop("again")
	require.Eventually(t, func() bool { return c.Dials() == 6 && node(t, sys, pid).State == protocol.StateAttached },
		faketransport.Bound, tick)
	require.Equal(t, 2, node(t, sys, pid).Restarts)
	require.NoError(t, faketransport.Drain(t, sys, pid))
	require.True(t, c.Last().Closed(), "the drain closes the connection")
}

func TestRefusedCredentialsFailTheConnectionForGood(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	c := &faketransport.Connector{}
	pid, s := start(t, sys, env, c)
	require.NoError(t, s.Err)
	denied := make([]error, actors.TerminalRetries+1)
	for i := range denied {
		denied[i] = &amqp.ConnError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondUnauthorizedAccess, Description: fmt.Sprint("denied ", i)}}
	}
	c.FailDials(denied...)
	c.Last().Drop("cut")
	require.Eventually(t, func() bool { return node(t, sys, pid).State == actors.StateFailed }, faketransport.Bound, tick,
		"refused credentials are not retried forever")
	require.Equal(t, 2+actors.TerminalRetries, c.Dials())
	require.Never(t, func() bool { return c.Dials() > 2+actors.TerminalRetries }, 100*time.Millisecond, tick,
		"a failed connection dialled again")
}

// The drain stops the requests (and the subscriptions) first, then the
// publisher, and closes the connection last.
func TestDrainOrder(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	c := &faketransport.Connector{}
	pid, s := start(t, sys, env, c)
	require.NoError(t, s.Err)
	conn := c.Last()

	// A request attaches the reply receiver on a session of its own.
	replies := make(chan protocol.Reply, 1)
	sys.Root.Send(s.Children.Requests, &protocol.Request{Key: "k", Ctx: context.Background(),
		Address: address.Queue("rpc"), Message: &messages.Message{Body: []byte("ping")}, Reply: replies})
	select {
	case r := <-replies:
		require.NoError(t, r.Err)
		require.NotNil(t, r.Send, "the caller is given the request to publish")
		require.Equal(t, "fake.reply", *r.Send.Properties.ReplyTo)
	case <-time.After(faketransport.Bound):
		t.Fatal("the request was never answered")
	}
	// A publish attaches a sender on the publisher's session.
	done := make(chan error, 1)
	s.Children.Senders.Hand(sys.Root, s.Children.Publisher, &protocol.Publish{Ctx: context.Background(),
		Address: address.Queue("orders"), Message: amqp.NewMessage([]byte("x")), Done: done})
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(faketransport.Bound):
		t.Fatal("the publish was never answered")
	}
	sessions := conn.Sessions()
	require.Len(t, sessions, 2, "the reply session and the publisher's")

	require.NoError(t, faketransport.Drain(t, sys, pid))
	ev := c.Log.Events()
	recv := slices.Index(ev, "receiver.close")
	send := slices.Index(ev, "sender.close")
	closed := slices.Index(ev, "conn.close")
	require.NotEqual(t, -1, recv, "%v", ev)
	require.NotEqual(t, -1, send, "%v", ev)
	require.Less(t, recv, send, "the requests drain before the publisher: %v", ev)
	require.Equal(t, len(ev)-1, closed, "the connection closes last: %v", ev)
	for _, s := range sessions {
		require.True(t, s.Closed(), "every session closed by the drain")
	}
	require.Equal(t, protocol.StateDetached, node(t, sys, pid).State)
}

// A panicking connection actor is restarted alone: the publisher, requests
// and txn actors are its siblings under the App's root, so they keep their
// sessions and links, and the next incarnation keeps the connection.
func TestRestartKeepsTheConnectionAndTheChildren(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	c := &faketransport.Connector{}
	pid, s := start(t, sys, env, c)
	require.NoError(t, s.Err)
	publish := func() {
		t.Helper()
		done := make(chan error, 1)
		s.Children.Senders.Hand(sys.Root, s.Children.Publisher, &protocol.Publish{Ctx: context.Background(),
			Address: address.Queue("orders"), Message: amqp.NewMessage([]byte("x")), Done: done})
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(faketransport.Bound):
			t.Fatal("the publish was never answered")
		}
	}
	publish()
	conn := c.Last()
	sessions := len(conn.Sessions())

	for i := 1; i <= 2; i++ {
		sys.Root.Send(pid, &testhook.Crash{Reason: "test"})
		require.Eventually(t, func() bool { return node(t, sys, pid).Counters["panics"] == uint64(i) }, faketransport.Bound, tick)
	}
	n := node(t, sys, pid)
	require.Equal(t, protocol.StateAttached, n.State)
	require.Equal(t, 2, n.Restarts, "a panic counts as a restart")
	require.Equal(t, 1, c.Dials(), "the connection was kept")
	require.False(t, conn.Closed())
	publish()
	require.Len(t, conn.Sessions(), sessions, "the publisher kept its session")
	require.Zero(t, node(t, sys, s.Children.Publisher).Restarts, "the publisher was not restarted")

	// The next incarnation still watches the connection: a loss reconnects.
	conn.Drop("cut")
	require.Eventually(t, func() bool { return c.Dials() == 2 && node(t, sys, pid).State == protocol.StateAttached },
		faketransport.Bound, tick)
	publish()
	require.NoError(t, faketransport.Drain(t, sys, pid))
	require.True(t, c.Last().Closed(), "the drain closes the connection")
}

// A connection actor that panics while it waits to dial again gives up its
// timer; the next incarnation dials at once and the children hear ConnUp.
func TestRestartWhileReconnectingDialsAgain(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	// A backoff far longer than the test: only a new incarnation dials.
	env.Backoff = actors.Backoff{Initial: time.Hour, Max: time.Hour}
	c := &faketransport.Connector{Features: transport.Features{Transactions: true}}
	pid, s := start(t, sys, env, c)
	require.NoError(t, s.Err)
	c.Last().Drop("cut")
	require.Eventually(t, func() bool { return node(t, sys, pid).State == protocol.StateRestarting },
		faketransport.Bound, tick, "after the cut the redial waits out the backoff")
	require.Equal(t, 1, c.Dials())
	require.Equal(t, protocol.StateDetached, node(t, sys, s.Children.Txn).State)
	sys.Root.Send(pid, &testhook.Crash{Reason: "test"})
	require.Eventually(t, func() bool { return node(t, sys, pid).State == protocol.StateAttached }, faketransport.Bound, tick,
		"the next incarnation connects")
	require.Eventually(t, func() bool { return node(t, sys, s.Children.Txn).State == protocol.StateAttached }, faketransport.Bound, tick,
		"the children hear ConnUp")
	require.EqualValues(t, 1, node(t, sys, pid).Counters["panics"])
	require.NoError(t, faketransport.Drain(t, sys, pid))
}

// TestNodeShowsTheBroker: the connection node names the broker the
// connection reached, as its open said, and keeps it while it is down.
func TestNodeShowsTheBroker(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	c := &faketransport.Connector{Features: transport.Features{Broker: "RabbitMQ 4.3.6"}}
	pid, s := start(t, sys, env, c)
	require.NoError(t, s.Err)
	require.Equal(t, "RabbitMQ 4.3.6", node(t, sys, pid).Broker)
	c.FailDials(errors.New("refused"))
	c.Last().Drop("network cut")
	require.Eventually(t, func() bool { return node(t, sys, pid).State != protocol.StateAttached }, faketransport.Bound, tick)
	require.Equal(t, "RabbitMQ 4.3.6", node(t, sys, pid).Broker, "the broker last reached, while reconnecting")
}
