package txn_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor/actors/txn"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/test/kit/faketransport"
	"github.com/amqpactor/amqpactor/transport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

type fakeTxn struct{}

func (fakeTxn) Publish(context.Context, address.Address, *amqp.Message) error   { return nil }
func (fakeTxn) Commit(context.Context) error                                    { return nil }
func (fakeTxn) Rollback(context.Context) error                                  { return nil }
func (fakeTxn) Accept(context.Context, transport.Receiver, *amqp.Message) error { return nil }

func begin(t *testing.T, send func(any)) protocol.BeginResult {
	t.Helper()
	reply := make(chan protocol.BeginResult, 1)
	send(&protocol.Begin{Ctx: context.Background(), Reply: reply})
	select {
	case r := <-reply:
		return r
	case <-time.After(faketransport.Bound):
		t.Fatal("Begin never answered")
		return protocol.BeginResult{}
	}
}

func TestBeginFollowsTheConnection(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	var begun atomic.Int64
	refused := errors.New("coordinator refused")
	c := &faketransport.Connector{Features: transport.Features{Transactions: true}}
	c.Begin = func(context.Context) (transport.Txn, error) {
		if begun.Add(1) == 2 {
			return nil, refused
		}
		return fakeTxn{}, nil
	}
	pid := sys.Root.Spawn(txn.New(env, "fake"))
	defer func() { require.NoError(t, sys.Root.PoisonFuture(pid).Wait()) }()
	send := func(m any) { sys.Root.Send(pid, m) }

	// not connected: an error naming the connector, no Begin on the wire
	r := begin(t, send)
	require.ErrorContains(t, r.Err, "transaction on fake: not connected")
	require.Equal(t, protocol.StateDetached, faketransport.Describe(t, sys, pid).Node.State)

	conn, err := c.Connect(context.Background())
	require.NoError(t, err)
	send(&protocol.ConnUp{Conn: conn})
	r = begin(t, send)
	require.NoError(t, r.Err)
	require.Equal(t, fakeTxn{}, r.Txn)
	r = begin(t, send)
	require.ErrorIs(t, r.Err, refused, "the coordinator's refusal reaches the caller")
	require.EqualValues(t, 2, begun.Load())

	send(&protocol.TxnEnded{Committed: true})
	send(&protocol.TxnEnded{Committed: false})
	send(&protocol.TxnEnded{Committed: true})
	n := faketransport.Describe(t, sys, pid).Node
	require.Equal(t, protocol.StateAttached, n.State)
	require.Equal(t, map[string]uint64{"begun": 2, "committed": 2, "rolledBack": 1}, n.Counters)

	// the connection goes: not connected again, nothing begun
	send(&protocol.ConnDown{Err: errors.New("cut")})
	r = begin(t, send)
	require.ErrorContains(t, r.Err, "not connected")
	require.EqualValues(t, 2, begun.Load())
	require.NoError(t, faketransport.Drain(t, sys, pid))
}

func TestBeginWithoutACoordinatorIsNotSupported(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	var called atomic.Bool
	c := &faketransport.Connector{} // no Transactions feature
	c.Begin = func(context.Context) (transport.Txn, error) { called.Store(true); return fakeTxn{}, nil }
	pid := sys.Root.Spawn(txn.New(env, "fake"))
	defer func() { require.NoError(t, sys.Root.PoisonFuture(pid).Wait()) }()
	conn, err := c.Connect(context.Background())
	require.NoError(t, err)
	sys.Root.Send(pid, &protocol.ConnUp{Conn: conn})
	r := begin(t, func(m any) { sys.Root.Send(pid, m) })
	require.ErrorIs(t, r.Err, transport.ErrNotSupported)
	require.False(t, called.Load(), "Begin called on a connection without transactions")
	require.Zero(t, faketransport.Describe(t, sys, pid).Node.Counters["begun"])
}

// A txn actor that panics keeps its connection and counters: the next
// Begin goes through with no ConnUp, and its node shows the restart.
func TestRestartKeepsTheConnection(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	c := &faketransport.Connector{Features: transport.Features{Transactions: true}}
	c.Begin = func(context.Context) (transport.Txn, error) { return fakeTxn{}, nil }
	pid := sys.Root.Spawn(txn.New(env, "fake"))
	defer func() { require.NoError(t, sys.Root.PoisonFuture(pid).Wait()) }()
	send := func(m any) { sys.Root.Send(pid, m) }
	conn, err := c.Connect(context.Background())
	require.NoError(t, err)
	send(&protocol.ConnUp{Conn: conn})
	require.NoError(t, begin(t, send).Err)
	send(&testhook.Crash{Reason: "test"})
	require.NoError(t, begin(t, send).Err, "the next incarnation has the connection")
	n := faketransport.Describe(t, sys, pid).Node
	require.Equal(t, protocol.StateAttached, n.State)
	require.EqualValues(t, 2, n.Counters["begun"])
	require.EqualValues(t, 1, n.Counters["panics"])
	require.Equal(t, 1, n.Restarts)
}
