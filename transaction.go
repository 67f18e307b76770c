package amqpactor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/receiver"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/transport"
)

// Transaction declares a transaction, runs fn, and commits when fn returns
// nil or rolls back when it returns an error (or panics; the panic goes on).
// On a connector without transactions it returns an error that errors.Is
// ErrNotSupported, and fn does not run.
func (a *App) Transaction(ctx context.Context, fn func(tx *Tx) error) (err error) {
	if ctx == nil {
		return errNil("Transaction", "context")
	}
	if fn == nil {
		return errNil("Transaction", "function")
	}
	env, ch, err := a.running(ctx)
	if err != nil {
		return err
	}
	reply := make(chan protocol.BeginResult, 1)
	env.Root.Send(ch.Txn, &protocol.Begin{Ctx: ctx, Reply: reply})
	var res protocol.BeginResult
	select {
	case res = <-reply:
	case <-ctx.Done():
		return fmt.Errorf("amqpactor: transaction: %w", ctx.Err())
	case <-env.Stopped():
		return fmt.Errorf("amqpactor: transaction: %w", ErrStopped)
	}
	if res.Err != nil {
		return res.Err
	}
	tx := &Tx{app: a, env: env, txn: res.Txn}
	committed := false
	defer func() {
		tx.done = true
		env.Root.Send(ch.Txn, &protocol.TxnEnded{Committed: committed})
	}()
	defer func() {
		if v := recover(); v != nil {
			_ = res.Txn.Rollback(context.WithoutCancel(ctx))
			panic(v)
		}
	}()
	if ferr := fn(tx); ferr != nil {
		if rerr := res.Txn.Rollback(context.WithoutCancel(ctx)); rerr != nil {
			return errors.Join(ferr, fmt.Errorf("amqpactor: rollback: %w", rerr))
		}
		return ferr
	}
	// The accepted deliveries become the transaction's before it commits,
	// so that their handlers' own settles stay off the wire.
	for i, h := range tx.accepted {
		if cerr := h.Claim(); cerr != nil {
			for _, c := range tx.accepted[:i] {
				c.Unclaim()
			}
			cerr = fmt.Errorf("amqpactor: commit: a message the transaction accepts was settled or its link ended: %w", cerr)
			if rerr := res.Txn.Rollback(context.WithoutCancel(ctx)); rerr != nil {
				return errors.Join(cerr, fmt.Errorf("amqpactor: rollback: %w", rerr))
			}
			return cerr
		}
	}
	if err := res.Txn.Commit(ctx); err != nil {
		for _, h := range tx.accepted {
			h.Unclaim()
		}
		return fmt.Errorf("amqpactor: commit: %w", err)
	}
	committed = true
	return nil
}

// Tx is one transaction; see App.Transaction.
type Tx struct {
	app      *App
	env      *actors.Env
	txn      transport.Txn
	done     bool
	accepted []receiver.Held
}

// Accept makes the acceptance of m, a message a subscription's handler is
// handling, part of the transaction: the commit settles it as accepted
// together with what the transaction published, so a handler can consume
// and produce atomically; after a rollback m is still its handler's to
// settle. Once the commit has accepted m, what its handler returns no
// longer settles it. Accept sends nothing itself.
//
// m must be an unsettled delivery of a subscription of the App that runs
// the transaction (not pre-settled, not settled yet, its link alive), else
// Accept fails; and the commit fails, settling nothing, if m was settled
// or its link ended meanwhile. On AMQP 0-9-1 a transaction can accept the
// deliveries of one subscription link only (one queue of a Partitioned
// address; WithPartitions workers share their link), since only the
// channel a message came on can acknowledge it.
func (tx *Tx) Accept(m *Message) error {
	if tx == nil {
		return errNil("Tx.Accept", "transaction")
	}
	if m == nil {
		return errNil("Tx.Accept", "message")
	}
	if tx.done {
		return errors.New("amqpactor: transaction already discharged")
	}
	if orig, ok := tx.app.actorCopies.Load(m); ok {
		m = orig.(*Message) // an actor's copy, while ActorHandler waits for it
	}
	h, err := receiver.Find(tx.env, m)
	if err != nil {
		return fmt.Errorf("amqpactor: transactional accept: %w", err)
	}
	if err := tx.txn.Accept(context.Background(), h.Link(), h.Raw); err != nil {
		return fmt.Errorf("amqpactor: transactional accept: %w", err)
	}
	tx.accepted = append(tx.accepted, h)
	return nil
}

// Publish sends m to addr inside the transaction: nothing is visible before
// commit. It is traced like App.Publish.
func (tx *Tx) Publish(ctx context.Context, addr Address, m *Message) error {
	if tx == nil {
		return errNil("Tx.Publish", "transaction")
	}
	if ctx == nil {
		return errNil("Tx.Publish", "context")
	}
	if m == nil {
		return errNil("Tx.Publish", "message")
	}
	a := tx.app
	if err := a.checkAddress(addr, address.Send); err != nil {
		return err
	}
	t := a.tel
	tg := a.dests.target(addr, useTransaction)
	start := time.Now()
	ctx, span, m := t.startSend(ctx, tg.publishName, tg, m, attribute.Bool("amqpactor.transactional", true))
	err := tx.publish(ctx, addr, m)
	r := publishResult(err, false)
	t.published.Add(ctx, 1, tg.published[r]...)
	t.publishDur.Record(ctx, time.Since(start).Seconds(), tg.pubDur[r]...)
	endSpan(span, err)
	return err
}

// publish is Tx.Publish without its tracing (above).
func (tx *Tx) publish(ctx context.Context, addr Address, m *Message) error {
	if tx.done {
		return errors.New("amqpactor: transaction already discharged")
	}
	if err := tx.app.checkAddress(addr, address.Send); err != nil {
		return err
	}
	addr = tx.app.partitionOf(addr, m.GroupID)
	raw, err := protocol.ToAMQP(m)
	if err != nil {
		return fmt.Errorf("amqpactor: transactional publish to %s: %w", addr, err)
	}
	return tx.txn.Publish(ctx, addr, raw)
}
