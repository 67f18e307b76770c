package receiver

// Draining: the link stops taking deliveries, its handlers settle what
// they hold, and it closes after its last settle; past the graceful part
// it is cut (deliver.Link.Cut).

import (
	"context"
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/internal/protocol"
)

// onDrain starts a graceful detach: no new deliveries are taken, in-flight
// handlers finish and settle, then the link closes after its last settle.
// Past the drain's deadline the link is closed at once and what handlers
// still hold goes back to the broker.
func (r *receiver) onDrain(ctx actor.Context, m *protocol.Drain) {
	if r.drain != nil {
		// Drained twice (Subscription.Close, then Stop): the second
		// hears what the first does.
		r.alsoDone = append(r.alsoDone, m.Done)
		return
	}
	// A drained receiver never attaches again: an attach in flight
	// closes its link when it comes back.
	r.stopping = true
	r.drain = m
	r.pause()
	// Out of the census before out of line: the other replicas must not
	// count this one while its partitions come to them.
	r.closeCensus()
	if r.link == nil {
		r.finishDrain(nil)
		return
	}
	// The data plane reports idle once the pump has stopped and the
	// handlers settled what it had handed out.
	r.dl.StopPump()
	self, gen, linkDone, grace := ctx.Self(), r.gen, r.dl.Done(), m.Grace()
	r.env.Go(func() {
		select {
		case <-grace.Done():
			r.env.Root.Send(self, &graceOver{link: gen})
		case <-linkDone:
		}
	})
}

// finishDrainedLink closes a draining link after its last settle.
func (r *receiver) finishDrainedLink() {
	r.leaveBalance()
	dl, drain := r.dl, r.drain
	answer := r.answerer() // forgets r.drain: after the line above
	r.link, r.dl = nil, nil
	dl.Close(drain.Ctx, func(err error) {
		dl.Cancel()
		answer(err)
	})
	r.set(evDetached, nil)
}

// cutDrainedLink ends a drain whose graceful part ran out: settles are
// refused from now on, what is still held goes back released, the link
// closes (all by the drain's Ctx), and the handlers' contexts are cancelled.
func (r *receiver) cutDrainedLink() {
	r.leaveBalance()
	dl, drain := r.dl, r.drain
	answer := r.answerer() // forgets r.drain: after the line above
	r.link, r.dl = nil, nil
	cut := fmt.Errorf("amqpactor: drain of %s: graceful part over: %w", r.spec.Address, context.DeadlineExceeded)
	dl.Cut(drain.Ctx, func(err error) {
		dl.Cancel() // before the answer, whichever goroutine gets there first
		answer(errors.Join(cut, err))
	})
	// After the cut: a handler that returns now cannot settle any more.
	dl.Cancel()
	r.lastErr = cut
	r.set(evDetached, cut)
}

// answerer returns what answers the drain in progress and every later
// one that joined it, and forgets them.
func (r *receiver) answerer() func(error) {
	drain, also := r.drain, r.alsoDone
	r.drain, r.alsoDone = nil, nil
	return func(err error) {
		drain.Done <- err
		for _, d := range also {
			d <- err
		}
	}
}

func (r *receiver) finishDrain(err error) {
	if r.drain != nil {
		r.answerer()(err)
	}
}

// pause holds back credit from now on; the data plane hears it in order
// with the settles.
func (r *receiver) pause() {
	r.paused = true
	if r.dl != nil {
		r.dl.Pause()
	}
}
