package amqp091

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/Azure/go-amqp"
	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport"
)

// errDischarged is wrapped by a use of a transaction after its commit or
// rollback.
var errDischarged = errors.New("the transaction is already committed or rolled back")

// Begin opens a channel in tx.select mode: what is published on it is
// enqueued by tx.commit all together, or by tx.rollback not at all.
func (c *Conn) Begin(ctx context.Context) (transport.Txn, error) {
	ch, err := c.channel(ctx)
	if err != nil {
		return nil, fmt.Errorf("amqpactor: begin transaction on %s: %w", c.c.redacted, err)
	}
	if err := c.call(ctx, ch, ch.Tx); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("amqpactor: begin transaction on %s: %w", c.c.redacted, err)
	}
	return &Txn{conn: c, ch: ch}, nil
}

// Txn is one transaction on its own channel. It implements transport.Txn.
type Txn struct {
	conn *Conn
	ch   *rmq.Channel

	mu   sync.Mutex
	done bool
}

var _ transport.Txn = (*Txn)(nil)

// Publish sends m to a inside the transaction. It is not mandatory: a
// basic.return inside a transaction would come before the commit with
// nobody to tell, so a publish nothing routes is dropped at commit, as
// RabbitMQ does for any unroutable publish without mandatory.
func (t *Txn) Publish(ctx context.Context, a address.Address, m *amqp.Message) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return &transport.LinkError{Address: a.String(), Op: "send", Err: errDischarged}
	}
	r, err := sendRoute(a)
	if err != nil {
		return err
	}
	if err := t.conn.declareForSend(ctx, a, r); err != nil {
		return err
	}
	pub, err := toPublishing(m)
	if err != nil {
		return &transport.LinkError{Address: a.String(), Op: "send", Err: err}
	}
	if err := t.ch.PublishWithContext(ctx, r.exchange, r.key, false, false, pub); err != nil {
		return linkError(ctx, a.String(), "send", t.conn.gone(err))
	}
	return nil
}

// Commit enqueues everything published in the transaction, and closes
// its channel.
func (t *Txn) Commit(ctx context.Context) error { return t.discharge(ctx, "commit", t.ch.TxCommit) }

// Rollback drops everything published in the transaction, and closes its
// channel.
func (t *Txn) Rollback(ctx context.Context) error {
	return t.discharge(ctx, "rollback", t.ch.TxRollback)
}

func (t *Txn) discharge(ctx context.Context, op string, f func() error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return fmt.Errorf("amqpactor: %s: %w", op, errDischarged)
	}
	t.done = true
	defer func() { _ = t.ch.Close() }()
	if err := t.conn.call(ctx, t.ch, f); err != nil {
		return fmt.Errorf("amqpactor: transaction %s on %s: %w", op, t.conn.c.redacted, err)
	}
	return nil
}
