package deliver

import (
	"context"
	"errors"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/internal/budget"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// settleItem is one thing for the settler to do, in order with the others.
type settleItem struct {
	raw     *amqp.Message
	outcome messages.Outcome
	// resume grants the credit held back while paused, or held back
	// until the link's first delivery told the budget its size;
	// unpause (with resume) and pause tell the settler the receiver's
	// Pause and Resume.
	resume, unpause, pause bool
	// txn: a transaction has settled the delivery already (Claim); the
	// settler only counts its credit.
	txn bool
	// close ends the link after every earlier settle and reports to done;
	// release lists deliveries to settle released first.
	close   bool
	release []*amqp.Message
	ctx     context.Context
	done    func(err error)
}

// credit is the settler's account of the link's credit: each time half the
// window has been settled it grants that much again, so the broker is never
// more than one window ahead and a held delivery keeps its credit. A budget
// may grant less than is owed: the settler then grants at every settle, and
// waits for other links' settles too (the budget's Wake).
type credit struct {
	bl        *budget.Link
	threshold uint32
	// owed is credit not granted yet (settled, or held back while the
	// link attached paused or under a budget). attachOwed is the part of
	// the attach's window that the budget's slow start held back: it is
	// granted even while paused, as the attach would have granted it.
	owed, attachOwed uint32
	paused           bool
	short            bool // the budget granted less than was owed
}

// grant issues what is owed on l, once there is enough of it.
func (c *credit) grant(l *Link) error {
	want := c.owed
	if c.paused {
		want = min(c.owed, c.attachOwed)
	}
	if want == 0 || (want < c.threshold && !c.short) {
		return nil
	}
	k := c.bl.Grant(want)
	if k < want {
		// Ask to be woken before asking again, so that a settle in
		// between is not missed.
		c.bl.Await()
		k += c.bl.Grant(want - k)
	}
	c.short = k < want
	if k == 0 {
		return nil
	}
	if err := l.cfg.Link.IssueCredit(k); err != nil {
		return err
	}
	c.owed -= k
	c.attachOwed -= min(k, c.attachOwed)
	return nil
}

// settler sends dispositions in order and grants credit (credit). paused is
// the receiver's when the link attached; its Pause and Resume come after it
// through the queue, in order with the settles.
func (l *Link) settler(owed, attachOwed uint32, paused bool) {
	if l.tracked {
		defer l.cfg.Holders.Remove(l)
	}
	// Everything the link held or reserved goes back when it ends: settles
	// that come after its queue closed are dropped, not counted.
	defer l.budget.Close()
	cr := credit{bl: l.budget, threshold: max(l.cfg.Credit/2, 1), owed: owed, attachOwed: attachOwed, paused: paused}
	link, q := l.cfg.Link, l.q
	// One bound for the dispositions of many batches, renewed once half of
	// it has gone: a context per message or per batch would allocate on the
	// hot path.
	var sctx context.Context
	var renew time.Time
	cancel := context.CancelFunc(func() {})
	defer func() { cancel() }()
	for {
		select {
		case <-q.Ready():
		case <-cr.bl.Wake():
			if err := cr.grant(l); err != nil {
				l.owner.Ended(err)
				return
			}
			continue
		}
		items, closed := q.Take()
		if sctx != nil && time.Now().After(renew) {
			cancel()
			sctx = nil
		}
		for _, it := range items {
			switch {
			case it.close:
				cancel()
				l.close(it)
				return
			case it.pause:
				cr.paused = true
				continue
			case it.resume:
				if it.unpause {
					cr.paused = false
				}
			default:
				// Before the disposition: a transport that recycles a
				// settled transfer may reuse its data at once.
				size := budget.Size(it.raw)
				if !l.cfg.Settled && !it.txn {
					if sctx == nil {
						sctx, cancel = l.cfg.CloseCtx(context.Background())
						if dl, ok := sctx.Deadline(); ok {
							now := time.Now()
							renew = now.Add(dl.Sub(now) / 2)
						}
					}
					if err := link.Settle(sctx, it.raw, it.outcome); errors.Is(err, transport.ErrSettledByBroker) {
						l.dropLate(it.outcome)
					} else if err != nil {
						l.cfg.Log.Debug("amqpactor: settle failed", "address", l.cfg.Address, "error", err)
					}
				}
				cr.bl.Settled(size)
				cr.owed++
			}
			// At each settle, not once a batch: a grant of everything a
			// batch settled can leave less than half a window owed, which a
			// batch handler waiting for a full window never settles.
			if err := cr.grant(l); err != nil {
				l.owner.Ended(err)
				return
			}
		}
		if closed {
			return
		}
	}
}

// dropLate accounts for a handler's outcome that came after the broker
// settled its delivery: nothing was sent, so it counts as late rather than
// as the outcome it would have been.
func (l *Link) dropLate(o messages.Outcome) {
	c := l.cfg.Counters
	if int(o.Kind) < len(c.ByOutcome) {
		c.ByOutcome[o.Kind].Add(^uint64(0))
	}
	c.Dropped.Add(1)
	l.cfg.Log.Info("amqpactor: handler's outcome dropped: the broker settled the delivery already",
		"address", l.cfg.Address, "outcome", o.Kind.String())
}

// close releases what it.release lists, closes the link by it.ctx and
// reports to it.done.
func (l *Link) close(it settleItem) {
	cctx, cancel := l.cfg.CloseCtx(it.ctx)
	defer cancel()
	var errs []error
	for _, raw := range it.release {
		// Back to the broker unchanged: delivery-count stays.
		if err := l.cfg.Link.Settle(cctx, raw, messages.Outcome{Kind: messages.Released}); err != nil {
			errs = append(errs, err)
			break
		}
		l.cfg.Counters.ByOutcome[messages.Released].Add(1)
	}
	errs = append(errs, l.cfg.Link.Close(cctx))
	cancel()
	it.done(errors.Join(errs...))
}
