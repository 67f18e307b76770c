package dispatcher

import (
	"context"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/workq"
	"github.com/amqpactor/amqpactor/messages"
)

// A partition actor owns one worker goroutine that runs the handler for the
// deliveries the dispatcher puts on its queue, one at a time, in arrival
// order; the worker settles each delivery straight with its link (Delivery.To).
// The worker is the incarnation's own (see Restarts in the package
// documentation); the counters are shared by every incarnation of one
// partition, so its node counts across restarts.
type partition struct {
	env   *actors.Env
	spec  *protocol.SubscriptionSpec
	index int
	rt    *Router
	q     *workq.Q[*protocol.Delivery]
	info  *protocol.Partition // what the handlers' context carries of it
	quit  chan struct{}       // closed to make this incarnation's worker return
	*counts
}

type counts struct {
	handled, failed, running, panics atomic.Uint64
}

func newPartition(env *actors.Env, spec *protocol.SubscriptionSpec, index int, rt *Router) *actor.Props {
	c := new(counts)
	info := &protocol.Partition{Address: spec.Address, Index: index}
	return env.Props(func() actor.Actor {
		return &partition{env: env, spec: spec, index: index, rt: rt, q: rt.queues[index], info: info, counts: c}
	})
}

func (p *partition) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		q, quit, done := p.q, make(chan struct{}), make(chan struct{})
		p.quit = quit
		prev := p.rt.follow(p.index, done)
		p.env.Go(func() {
			defer close(done)
			if prev != nil {
				<-prev // the last incarnation's worker finishes what it took
			}
			if p.spec.BatchHandler != nil {
				p.batchWorker(q, quit)
			} else {
				p.worker(q, quit)
			}
		})
	case *actors.Crash:
		panic(fmt.Sprintf("amqpactor: partition-%d of %s: %s", p.index, p.spec.Address, m.Reason))
	case *actor.Restarting:
		p.panics.Add(1)
		close(p.quit)
	case *protocol.Describe:
		ctx.Respond(&protocol.Described{Node: &protocol.Node{
			Name: "partition-" + strconv.Itoa(p.index), Kind: "partition", PID: ctx.Self().String(),
			State: protocol.StateAttached, Restarts: int(p.panics.Load()),
			Counters: map[string]uint64{
				"panics":  p.panics.Load(),
				"queued":  uint64(p.q.Len()),
				"running": p.running.Load(),
				"handled": p.handled.Load(),
				"failed":  p.failed.Load(),
			},
		}})
	case *actor.Stopping:
		if p.rt.handover.Load() {
			// The dispatcher restarts: the next partition takes the queue.
			close(p.quit)
			return
		}
		p.q.Close()
	}
}

// worker runs the handler for each delivery of q in order, until q is
// closed (what it had taken and not run stays unsettled: its link's end
// gives it back) or quit is (it first runs everything it had taken).
func (p *partition) worker(q *workq.Q[*protocol.Delivery], quit <-chan struct{}) {
	// hctx is the handlers' context: the link's, carrying the partition
	// index; made again only when the link (and so its context) changes.
	var base, hctx context.Context
	// yield is the link of a delivery whose retry a drain interrupted: the
	// rest of what that link handed this partition goes back too, released,
	// rather than overtake it.
	var yield uint64
	for {
		select {
		case <-quit:
			return
		default:
		}
		select {
		case <-q.Ready():
		case <-quit:
			return
		}
		items, closed := q.Take()
		for _, d := range items {
			if closed {
				break
			}
			if d.Ctx.Err() != nil {
				continue // its link is gone; the broker redelivers it
			}
			if yield != 0 && d.Link == yield {
				d.Settle(messages.Outcome{Kind: messages.Released})
				continue
			}
			if d.Ctx != base {
				base, hctx = d.Ctx, protocol.WithPartition(d.Ctx, p.info)
			}
			msgs := [1]*messages.Message{d.Message}
			err, stopped := p.attempts(d, msgs[:], func() error {
				return p.run(hctx, func(ctx context.Context) error { return p.spec.Handler(ctx, d.Message) })
			})
			if stopped {
				yield = d.Link
			}
			d.Settle(p.spec.Outcome(d.Ctx, err, d.Message))
		}
		if closed {
			return
		}
	}
}

// batchWorker hands the handler what has arrived, up to the batch size, or
// what arrived within the batch wait after the first delivery.
// On quit it runs what it holds, then returns.
func (p *partition) batchWorker(q *workq.Q[*protocol.Delivery], quit <-chan struct{}) {
	size := max(min(p.spec.BatchSize, int(p.spec.Credit)), 1)
	wait := p.spec.BatchWait
	if wait <= 0 {
		wait = 50 * time.Millisecond
	}
	var pending []*protocol.Delivery
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	armed := false
	for {
		flush := false
		select {
		case <-q.Ready(): // never closed: Take reports the queue's end
			items, closed := q.Take()
			if closed {
				return
			}
			for _, d := range items {
				if d.Ctx.Err() == nil {
					pending = append(pending, d)
				}
			}
			if len(pending) >= size {
				flush = true
			} else if len(pending) > 0 && !armed {
				timer.Reset(wait)
				armed = true
			}
		case <-timer.C:
			armed = false
			flush = true
		case <-quit:
			for len(pending) > 0 {
				n := min(len(pending), size)
				p.runBatch(pending[:n])
				pending = pending[n:]
			}
			return
		}
		for flush && len(pending) > 0 {
			n := min(len(pending), size)
			p.runBatch(pending[:n])
			pending = append(pending[:0], pending[n:]...)
			flush = len(pending) >= size
		}
		if len(pending) == 0 && armed {
			timer.Stop()
			armed = false
		} else if len(pending) > 0 && !armed {
			timer.Reset(wait)
			armed = true
		}
	}
}

func (p *partition) runBatch(batch []*protocol.Delivery) {
	live := batch[:0:0]
	msgs := make([]*messages.Message, 0, len(batch))
	for _, d := range batch {
		if d.Ctx.Err() == nil {
			live = append(live, d)
			msgs = append(msgs, d.Message)
		}
	}
	if len(live) == 0 {
		return
	}
	ctx := protocol.WithPartition(live[0].Ctx, p.info)
	err, _ := p.attempts(live[0], msgs, func() error {
		return p.run(ctx, func(ctx context.Context) error { return p.spec.BatchHandler(ctx, msgs) })
	})
	for _, d := range live {
		d.Settle(p.spec.Outcome(d.Ctx, err, d.Message))
	}
}

// run calls the handler, turning a panic into a failure so one poison
// message never stops the worker.
func (p *partition) run(ctx context.Context, f func(context.Context) error) (err error) {
	if d := p.spec.HandlerTimeout; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	p.running.Add(1)
	defer func() {
		p.running.Add(^uint64(0))
		if v := recover(); v != nil {
			p.env.Log.Error("amqpactor: handler panicked", "address", p.spec.Address.String(), "panic", v, "stack", string(debug.Stack()))
			err = fmt.Errorf("amqpactor: handler panicked: %v", v)
		}
		if err != nil {
			p.failed.Add(1)
		}
		p.handled.Add(1)
	}()
	return f(ctx)
}

// attempts runs once, and again after each retryable failure while
// spec.Retry allows, waiting its backoff in between: the partition holds
// back the rest of its queue meanwhile, so a group's order survives a
// failure. Each new attempt shows ms one delivery-count higher, as a
// redelivery would. It returns the last failure, and stopped when d's link
// drained or ended during a wait: that failure then goes to the broker as
// any other (modified), to be redelivered.
func (p *partition) attempts(d *protocol.Delivery, ms []*messages.Message, run func() error) (err error, stopped bool) {
	r := &p.spec.Retry
	for n := 1; ; n++ {
		err = run()
		if err == nil || r.Backoff <= 0 || (r.Retryable != nil && !r.Retryable(err)) || lastAttempt(r, ms) {
			return err, false
		}
		wait := r.Delay(n)
		if r.Failed != nil {
			for _, m := range ms {
				r.Failed(d.Ctx, err, m, wait)
			}
		}
		if !sleep(d, wait) {
			return err, true
		}
		for _, m := range ms {
			m.DeliveryCount++
			m.FirstAcquirer = false
		}
	}
}

// lastAttempt reports that a message of ms is on its last delivery.
func lastAttempt(r *protocol.Retry, ms []*messages.Message) bool {
	for _, m := range ms {
		if m.DeliveryCount+1 >= r.MaxDeliveries {
			return true
		}
	}
	return false
}

// sleep waits d, or until the delivery's link drains or ends; it reports
// whether the wait ran its course.
func sleep(d *protocol.Delivery, wait time.Duration) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-d.Ctx.Done():
	case <-d.Draining:
	}
	return false
}
