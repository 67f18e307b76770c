package deliver

import (
	"context"

	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
)

// hold notes a delivery handed to the handlers.
func (l *Link) hold(d *protocol.Delivery) {
	if !l.tracked {
		return
	}
	l.mu.Lock()
	if !l.cut {
		last := l.held.HeldPrev
		d.HeldPrev, d.HeldNext, d.HeldIn = last, &l.held, l
		last.HeldNext = d
		l.held.HeldPrev = d
	}
	l.mu.Unlock()
}

// unlinkLocked takes d out of the ring. l.mu is held.
func (l *Link) unlinkLocked(d *protocol.Delivery) {
	d.HeldPrev.HeldNext = d.HeldNext
	d.HeldNext.HeldPrev = d.HeldPrev
	d.HeldPrev, d.HeldNext, d.HeldIn = nil, nil, nil
}

// push queues a settle for the settler, unless the link was cut (or has
// ended). A delivery a transaction claimed goes to the settler only for
// its credit.
func (l *Link) push(d *protocol.Delivery, it settleItem) bool {
	if !l.tracked {
		return l.q.Push(it)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		return false
	}
	linked := d.HeldIn == l
	it.txn = linked && d.Claimed
	if linked {
		// Out of the ring whatever happens: d goes back to its pool.
		l.unlinkLocked(d)
	}
	return l.q.Push(it)
}

// Cut ends a drain whose graceful part ran out: settles are refused from
// now on, and the settler releases every delivery still held and closes
// the link, by ctx, reporting to done. A delivery a transaction claimed is
// the transaction's to settle.
func (l *Link) Cut(ctx context.Context, done func(error)) {
	it := settleItem{close: true, ctx: ctx, done: done}
	l.mu.Lock()
	l.cut = true
	if l.tracked {
		for d := l.held.HeldNext; d != &l.held; {
			next := d.HeldNext
			if !d.Claimed {
				it.release = append(it.release, d.Raw)
			}
			l.unlinkLocked(d)
			d = next
		}
	}
	l.q.PushClose(it)
	l.mu.Unlock()
}

// Settle queues the verdicts (each Delivery.Outcome) of ds for the
// settler, in order, and releases ds. The actor calls it for what the
// Owner's Settler sent it.
func (l *Link) Settle(ds []*protocol.Delivery) {
	for _, d := range ds {
		l.settleOne(d, d.Outcome)
	}
}

func (l *Link) settleOne(d *protocol.Delivery, o messages.Outcome) {
	ok := l.push(d, settleItem{raw: d.Raw, outcome: o})
	d.Release()
	l.unsettled.Add(-1)
	c := l.cfg.Counters
	if ok {
		if int(o.Kind) < len(c.ByOutcome) {
			c.ByOutcome[o.Kind].Add(1)
		}
	} else {
		// The link ended: the broker has taken the delivery back.
		c.Dropped.Add(1)
	}
	l.release()
}

func (l *Link) release() {
	if l.open.Add(-1) == 0 {
		l.owner.Idle()
	}
}
