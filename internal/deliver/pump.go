package deliver

import (
	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/internal/budget"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// pumpBatch bounds the deliveries one batch to the Owner carries.
const pumpBatch = 256

// PoisonCondition is the error condition a poison message is rejected with.
const PoisonCondition = "amqp:decode-error"

// pump blocks in Receive so the actor never does, and hands the Owner what
// it receives: with each transfer, what else the link has prefetched (up
// to pumpBatch), in one batch.
func (l *Link) pump() {
	defer l.release()
	ctx, link, c := l.pumpCtx, l.cfg.Link, l.cfg.Counters
	var id uint64
	pf, _ := link.(transport.Prefetcher)
	batch := l.owner.Batch()
	// Nothing reads a delivery's transfer once the settler has settled it,
	// so a transport that can reuse its memory may, once the handler's
	// Message has its own Body.
	fromAMQP := protocol.FromAMQP
	if rc, ok := link.(transport.Recycler); ok && !l.cfg.Settled {
		rc.RecycleSettled()
		fromAMQP = protocol.FromAMQPOwned
	}
	take := func(raw *amqp.Message) {
		c.Delivered.Add(1)
		if l.budget.Arrived(budget.Size(raw)) {
			// The size is known now: the settler may grant the rest.
			l.q.Push(settleItem{resume: true})
		}
		if reason, ok := transport.Poison(raw); ok {
			l.rejectPoison(raw, reason)
			return
		}
		id++
		d := protocol.NewDelivery()
		d.ID, d.Link, d.Raw, d.Message, d.Ctx, d.To = id, l.cfg.Gen, raw, fromAMQP(raw), l.ctx, l.owner
		d.Draining = ctx.Done() // a worker waiting to retry stops at a drain
		l.open.Add(1)
		l.unsettled.Add(1)
		l.hold(d)
		batch = append(batch, d)
	}
	for {
		raw, err := link.Receive(ctx)
		if err != nil {
			if ctx.Err() == nil {
				l.owner.Ended(err)
			}
			return
		}
		if ctx.Err() != nil {
			// The link is ending (a restart, a stop): the delivery stays
			// unsettled and its link's close gives it back to the broker.
			return
		}
		take(raw)
		for pf != nil && len(batch) < pumpBatch && ctx.Err() == nil {
			raw := pf.Prefetched()
			if raw == nil {
				break
			}
			take(raw)
		}
		if len(batch) > 0 {
			// What was taken is counted in open: it goes to the handlers
			// even when the link is ending now.
			l.owner.Dispatch(batch)
			batch = l.owner.Batch()
		}
	}
}

// rejectPoison settles a poison message (transport.Poison: its payload was
// not safe to decode, or was over the max message size) without a handler:
// rejected with amqp:decode-error and the reason, so the broker drops or
// dead-letters it alone and the link goes on. A pre-settled one is only
// counted and logged. The payload is never logged.
func (l *Link) rejectPoison(raw *amqp.Message, reason string) {
	c := l.cfg.Counters
	c.Poison.Add(1)
	if l.cfg.Settled {
		l.cfg.Log.Warn("amqpactor: poison message dropped (pre-settled)", "address", l.cfg.Address, "reason", reason)
	} else {
		l.cfg.Log.Warn("amqpactor: poison message rejected", "address", l.cfg.Address, "reason", reason)
	}
	o := messages.Outcome{Kind: messages.Rejected, Condition: PoisonCondition,
		Description: "amqpactor: the message cannot be decoded safely: " + reason}
	// The settler sends the disposition in order and counts the credit.
	if l.q.Push(settleItem{raw: raw, outcome: o}) {
		c.ByOutcome[messages.Rejected].Add(1)
	} else {
		c.Dropped.Add(1)
	}
}
