package publish

import (
	"errors"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// confirm waits for outcomes in send order and answers each publisher. A
// transfer whose link ended before its outcome came is handed back (with
// the link's error, which also tells an idle sender that its link is gone)
// to be sent again, unless its publisher's context has ended.
func (k *Link) confirm() {
	defer close(k.done)
	cq := k.cq
	for range cq.Ready() {
		items, closed := cq.Take()
		var again []*protocol.Publish
		var gone error
		for _, j := range items {
			if j.done != nil {
				j.done <- nil
				continue
			}
			outcome, err := j.receipt.Wait(j.p.Ctx)
			if rc, ok := j.receipt.(transport.ReusableReceipt); ok {
				rc.Recycle()
			}
			switch {
			case err != nil && j.p.Ctx.Err() == nil && linkGone(err):
				again = append(again, j.p)
				gone = err
			case err != nil:
				k.counts.Failed.Add(1)
				j.p.Answer(err)
			default:
				k.answer(j.p, outcome)
			}
		}
		if len(again) > 0 {
			k.ended(&Ended{Gen: k.gen, Err: gone, Unsent: again, Written: true})
		}
		if closed {
			return
		}
	}
}

// answer tells a publisher the broker's outcome.
func (k *Link) answer(p *protocol.Publish, o messages.Outcome) {
	if o.Kind != messages.Accepted {
		k.counts.Failed.Add(1)
		p.Answer(&messages.OutcomeError{Address: p.Address.String(), Outcome: o})
		return
	}
	k.counts.Confirmed.Add(1)
	p.Answer(nil)
}

// linkGone reports an error that says the link (or its session or
// connection) has ended, as opposed to the caller's context ending. It is
// actors.LinkGone's test, here so that the data plane needs no actor
// runtime; a test keeps the two alike.
func linkGone(err error) bool {
	var le *amqp.LinkError
	var se *amqp.SessionError
	var ce *amqp.ConnError
	return errors.As(err, &le) || errors.As(err, &se) || errors.As(err, &ce)
}
