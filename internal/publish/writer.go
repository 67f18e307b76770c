package publish

import (
	"fmt"
	"runtime"

	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/transport"
)

// write sends in order without waiting for outcomes, until the actor
// closes the writer's queue (Stop, or Finish's marker). One channel to wait
// on, not a select with a cancel, which would cost on every batch.
func (k *Link) write() {
	defer k.cq.Close()
	wq, cq, link, relay := k.wq, k.cq, k.link, k.relay
	for range wq.Ready() {
		items, closed := wq.Take()
		answered := false // the writer answered a publisher itself
		for i, j := range items {
			if j.done != nil {
				cq.Push(j)
				continue
			}
			p := j.p
			if err := p.Ctx.Err(); err != nil {
				p.Answer(err)
				answered = true
				continue
			}
			var receipt transport.Receipt
			var err error
			if relay != nil {
				receipt, err = relay.SendTo(p.Ctx, p.Address, p.Message, p.Settled)
			} else {
				receipt, err = link.Send(p.Ctx, p.Message, p.Settled)
			}
			if err != nil {
				if p.Ctx.Err() != nil {
					p.Answer(err)
					answered = true
					continue
				}
				if relay != nil && !linkGone(err) {
					// Its address could not be spelt or declared: that
					// publish fails, the link goes on.
					k.counts.Failed.Add(1)
					p.Answer(fmt.Errorf("amqpactor: publish to %s: %w", p.Address, err))
					answered = true
					continue
				}
				// The link died under us: everything not yet written goes
				// back to the actor to be sent on the next link.
				unsent := make([]*protocol.Publish, 0, len(items)-i)
				for _, r := range items[i:] {
					if r.p != nil {
						unsent = append(unsent, r.p)
					} else {
						r.done <- err
					}
				}
				more, _ := wq.Take()
				for _, r := range more {
					if r.p != nil {
						unsent = append(unsent, r.p)
					}
				}
				k.ended(&Ended{Gen: k.gen, Err: err, Unsent: unsent})
				return
			}
			k.counts.Published.Add(1)
			if receipt == nil {
				k.counts.Confirmed.Add(1)
				p.Answer(nil)
				answered = true
				continue
			}
			if r, ok := receipt.(transport.Resolved); ok && cq.Len() == 0 {
				if o, done := r.Resolved(); done {
					k.answer(p, o)
					answered = true
					continue
				}
			}
			cq.Push(job{p: p, receipt: receipt})
		}
		if closed {
			return
		}
		// The publishers the writer answered itself (an outcome known at
		// once, in-process, or a settled publish) are runnable now; one
		// yield lets them queue their next ones, so the next Take returns a
		// batch instead of one or two publishes. Publishers that await the
		// confirmer are not, and a yield would only delay the next Take.
		if answered {
			runtime.Gosched()
		}
	}
}
