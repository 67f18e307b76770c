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

func begin(t *testing.T, e *env) transport.Txn {
	t.Helper()
	tx, err := e.conn.(transport.Transactional).Begin(context.Background())
	require.NoError(t, err)
	return tx
}

func TestTransactionInvisibleBeforeCommit(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	q := address.Queue("tx-orders")
	top := address.Topic("tx-events")
	rq := e.sub(q, 10)
	rt := e.sub(top, 10)

	tx := begin(t, e)
	require.NoError(t, tx.Publish(ctx, q, amqp.NewMessage([]byte("o1"))))
	require.NoError(t, tx.Publish(ctx, top, amqp.NewMessage([]byte("e1"))))
	require.NoError(t, tx.Publish(ctx, q, amqp.NewMessage([]byte("o2"))))

	nothing(t, rq)
	nothing(t, rt)
	require.Equal(t, 0, e.b.QueueDepth("tx-orders")+e.b.Unsettled("tx-orders"))

	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, "o1", recvBody(t, rq))
	require.Equal(t, "o2", recvBody(t, rq))
	require.Equal(t, "e1", recvBody(t, rt))

	require.ErrorIs(t, tx.Publish(ctx, q, amqp.NewMessage(nil)), ErrTxnDone)
	require.ErrorIs(t, tx.Commit(ctx), ErrTxnDone)
	require.ErrorIs(t, tx.Rollback(ctx), ErrTxnDone)
}

func TestTransactionRollbackDiscards(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	q := address.Queue("tx-rb")
	e.b.DeclareQueue("tx-rb")
	tx := begin(t, e)
	require.NoError(t, tx.Publish(ctx, q, amqp.NewMessage([]byte("gone"))))
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 0, e.b.QueueDepth("tx-rb"))
	require.ErrorIs(t, tx.Commit(ctx), ErrTxnDone)
	require.ErrorIs(t, tx.Publish(ctx, q, amqp.NewMessage(nil)), ErrTxnDone)
}

func TestTransactionCommitAfterConnectionLossFails(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	q := address.Queue("tx-lost")
	e.b.DeclareQueue("tx-lost")
	tx := begin(t, e)
	require.NoError(t, tx.Publish(ctx, q, amqp.NewMessage([]byte("x"))))
	e.b.DropConnections(nil)
	err := tx.Commit(ctx)
	var ce *amqp.ConnError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 0, e.b.QueueDepth("tx-lost"))
	_, err = e.conn.(transport.Transactional).Begin(ctx)
	require.ErrorAs(t, err, &ce)
}

func TestTransactionPublishOfUnencodableMessageFails(t *testing.T) {
	e := newEnv(t)
	tx := begin(t, e)
	require.Error(t, tx.Publish(context.Background(), address.Queue("q"), &amqp.Message{Value: struct{}{}}))
	require.Error(t, tx.Publish(context.Background(), address.Queue(""), amqp.NewMessage(nil)))
	require.NoError(t, tx.Rollback(context.Background()))
}

// A transaction that accepts deliveries settles them at its commit, with
// its publishes; one whose delivery was settled meanwhile, or whose link
// ended, commits nothing and settles nothing.
func TestTransactionAccept(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	in, out := address.Queue("txa-in"), address.Queue("txa-out")
	r := e.sub(in, 10)
	ro := e.sub(out, 10)
	s := e.sender(in)
	e.sendN(s, "m", 3)
	m0, m1, m2 := recv(t, r), recv(t, r), recv(t, r)

	tx := begin(t, e)
	require.NoError(t, tx.Publish(ctx, out, amqp.NewMessage([]byte("r0"))))
	require.NoError(t, tx.Accept(ctx, r, m0))
	require.Equal(t, 3, e.b.Unsettled("txa-in"))
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, "r0", recvBody(t, ro))
	require.Equal(t, 2, e.b.Unsettled("txa-in"), "the commit accepted m0")
	require.ErrorIs(t, r.Settle(ctx, m0, messages.Outcome{Kind: messages.Accepted}), ErrUnknownDelivery)

	tx = begin(t, e)
	require.NoError(t, tx.Publish(ctx, out, amqp.NewMessage([]byte("r1"))))
	require.NoError(t, tx.Accept(ctx, r, m1))
	require.NoError(t, tx.Accept(ctx, r, m2))
	settle(t, r, m2, messages.Outcome{Kind: messages.Released})
	require.ErrorIs(t, tx.Commit(ctx), ErrUnknownDelivery)
	nothing(t, ro)
	again := recv(t, r)
	require.Equal(t, string(m2.GetData()), string(again.GetData()), "m2 back from the queue, released")
	require.Equal(t, 2, e.b.Unsettled("txa-in"), "m1 is still its receiver's, and m2 again")
	settle(t, r, m1, messages.Outcome{Kind: messages.Accepted})
	settle(t, r, again, messages.Outcome{Kind: messages.Accepted})

	require.Error(t, begin(t, e).Accept(ctx, nil, m1), "a receiver of no broker")
}
