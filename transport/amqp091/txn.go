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

// Begin starts a transaction on a live connection. It sends nothing: the
// transaction's publishes wait for Commit, which sends them on a channel
// in tx.select mode (Txn), so one that rolls back or accepts deliveries
// (and commits on their channel) never needs a channel of its own.
func (c *Conn) Begin(ctx context.Context) (transport.Txn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.conn.IsClosed() {
		return nil, fmt.Errorf("amqpactor: begin transaction on %s: %w", c.c.redacted, c.gone(rmq.ErrClosed))
	}
	return &Txn{conn: c}, nil
}

// Bounds on what a transaction buffers until its commit.
const (
	maxTxnPublishes = 1 << 16
	maxTxnBytes     = 64 << 20
)

// Txn is one transaction. It implements transport.Txn. Publishes wait in
// the Txn until Commit, which sends them on a channel of the transaction's
// own, or, once Accept has bound the transaction to a subscription's
// channel, on that channel together with the acknowledgements: in AMQP
// 0-9-1 a transaction is a channel's, and only the channel a message was
// delivered on can acknowledge it.
type Txn struct {
	conn *Conn

	mu      sync.Mutex
	done    bool
	pubs    []txPublish
	bytes   int
	recv    *Receiver // the channel Accept bound the transaction to
	accepts []*amqp.Message
}

// txPublish is one publish waiting for its transaction's commit.
type txPublish struct {
	exchange, key string
	pub           rmq.Publishing
}

var _ transport.Txn = (*Txn)(nil)

// Publish queues m for a, to be sent at Commit. It is not mandatory: a
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
	if err == nil {
		r, err = r.forMessage(m)
	}
	if err != nil {
		return &transport.LinkError{Address: a.String(), Op: "send", Err: err}
	}
	if len(t.pubs) >= maxTxnPublishes || t.bytes+len(pub.Body) > maxTxnBytes {
		return &transport.LinkError{Address: a.String(), Op: "send", Err: fmt.Errorf(
			"a transaction holds at most %d publishes and %d bytes of bodies until its commit", maxTxnPublishes, maxTxnBytes)}
	}
	t.pubs = append(t.pubs, txPublish{exchange: r.exchange, key: r.key, pub: pub})
	t.bytes += len(pub.Body)
	return nil
}

// Accept binds the transaction to the channel m was delivered on (the
// first Accept does; m must come from the same subscription link as every
// other message the transaction accepts) and acknowledges m at Commit.
func (t *Txn) Accept(ctx context.Context, r transport.Receiver, m *amqp.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rr, ok := r.(*Receiver)
	if !ok || rr.s.conn != t.conn || m == nil {
		return fmt.Errorf("amqpactor: transactional accept: %w: the delivery did not come on this transaction's connection", transport.ErrNotSupported)
	}
	if rr.acks == nil {
		return fmt.Errorf("amqpactor: transactional accept on %s: %w: the receiver takes its deliveries pre-settled", rr.addr, transport.ErrNotSupported)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return fmt.Errorf("amqpactor: transactional accept: %w", errDischarged)
	}
	if t.recv != nil && t.recv != rr {
		return fmt.Errorf("amqpactor: transactional accept on %s: %w: an AMQP 0-9-1 transaction can acknowledge the deliveries of one subscription link only (it already acknowledges one of %s)",
			rr.addr, transport.ErrNotSupported, t.recv.addr)
	}
	rr.mu.Lock()
	_, held := rr.held[m]
	rr.mu.Unlock()
	if !held {
		return &transport.LinkError{Address: rr.addr, Op: "receive", Err: errors.New("accept a message that this receiver does not hold")}
	}
	t.recv = rr
	t.accepts = append(t.accepts, m)
	return nil
}

// Commit sends and commits what the transaction published, and the
// acknowledgements it accepted, all together.
func (t *Txn) Commit(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	pubs, recv, accepts, err := t.discharge("commit")
	if err != nil {
		return err
	}
	if recv != nil {
		err = recv.commitTx(ctx, pubs, accepts)
	} else {
		err = t.conn.commitOwn(ctx, pubs)
	}
	if err != nil {
		return fmt.Errorf("amqpactor: transaction commit on %s: %w", t.conn.c.redacted, err)
	}
	return nil
}

// Rollback drops everything the transaction published and accepted: none
// of it was sent.
func (t *Txn) Rollback(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, _, _, err := t.discharge("rollback")
	return err
}

// discharge ends the transaction, with t.mu held, and hands over what it
// published and accepted; op names the call that finds it already ended.
func (t *Txn) discharge(op string) (pubs []txPublish, recv *Receiver, accepts []*amqp.Message, err error) {
	if t.done {
		return nil, nil, nil, fmt.Errorf("amqpactor: %s: %w", op, errDischarged)
	}
	t.done = true
	pubs, recv, accepts = t.pubs, t.recv, t.accepts
	t.pubs, t.accepts = nil, nil
	return pubs, recv, accepts, nil
}

// commitOwn sends pubs and tx.commit on a channel of their own in
// tx.select mode, closed after.
func (c *Conn) commitOwn(ctx context.Context, pubs []txPublish) error {
	if len(pubs) == 0 {
		return nil
	}
	ch, err := c.channel(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	return c.call(ctx, ch, func() error {
		if err := ch.Tx(); err != nil {
			return err
		}
		if err := publishAll(ctx, ch, pubs); err != nil {
			return err
		}
		return ch.TxCommit()
	})
}

func publishAll(ctx context.Context, ch *rmq.Channel, pubs []txPublish) error {
	for i := range pubs {
		p := &pubs[i]
		if err := ch.PublishWithContext(ctx, p.exchange, p.key, false, false, p.pub); err != nil {
			return err
		}
	}
	return nil
}

// commitTx publishes pubs and acknowledges ms on the receiver's channel in
// one transaction. The first one puts the channel in tx.select mode, after
// the acknowledgements already queued, which are not the transaction's;
// from then on the acker commits its own as well (chanAcks). Nothing else
// is sent on the channel between the first publish and tx.commit, so the
// transaction holds exactly its own publishes and acknowledgements. A
// failed commit closes the channel (amqp091-go does on a channel error,
// Conn.call on a deadline), which rolls the transaction back and gives
// every delivery back, redelivered.
func (r *Receiver) commitTx(ctx context.Context, pubs []txPublish, ms []*amqp.Message) error {
	s := r.s
	s.acks.Lock()
	defer s.acks.Unlock()
	r.mu.Lock()
	tags := make([]uint64, 0, len(ms))
	for _, m := range ms {
		tag, ok := r.held[m]
		if !ok || r.closing {
			r.mu.Unlock()
			return &transport.LinkError{Address: r.addr, Op: "receive",
				Err: errors.New("a message the transaction accepts was settled, or its consumer closed, before the commit")}
		}
		tags = append(tags, tag)
	}
	r.mu.Unlock()
	s.mu.Lock()
	confirming := s.pub != nil
	s.mu.Unlock()
	if confirming {
		return fmt.Errorf("%w: the channel of %s is in confirm mode", transport.ErrNotSupported, r.addr)
	}
	if !s.acks.tx {
		if err := r.acks.flushLocked(); err != nil {
			return err
		}
		if err := s.call(ctx, s.ch.Tx); err != nil {
			return err
		}
		s.acks.tx = true
	}
	err := s.call(ctx, func() error {
		if err := publishAll(ctx, s.ch, pubs); err != nil {
			return err
		}
		for _, tag := range tags {
			if err := s.ch.Ack(tag, false); err != nil {
				return err
			}
		}
		return s.ch.TxCommit()
	})
	if err != nil {
		// Whatever was sent must not ride on a later commit.
		_ = s.ch.Close()
		return err
	}
	r.mu.Lock()
	for _, m := range ms {
		delete(r.held, m)
	}
	r.mu.Unlock()
	r.acks.settledLocked(tags)
	return nil
}
