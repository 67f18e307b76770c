package dispatcher

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/internal/workq"
	"github.com/amqpactor/amqpactor/messages"
)

// A partition actor queues the deliveries the dispatcher sends it and owns
// the worker goroutine that runs the handler for them, one at a time, in
// arrival order; the worker gives the outcomes back to each delivery's
// Settler (Delivery.To) in batches, naming the partition. The
// worker is the incarnation's own and comes and goes with work (see the
// package documentation); the counters are shared by every incarnation of
// one partition, so its node counts across restarts.
type partition struct {
	env   *actors.Env
	spec  *protocol.SubscriptionSpec
	index int
	rt    *Router
	q     *workq.Q[*protocol.Delivery]
	info  *protocol.Partition // what the handlers' context carries of it
	// self, quit, prev and quitting are ONLY touched by the actor's mailbox run.
	self *actor.PID
	quit chan struct{} // closed to make this incarnation's worker return
	// prev is closed when the worker of an earlier incarnation returns:
	// until then this one restarts (its worker waits for that one).
	prev     chan struct{}
	quitting bool
	// working: this incarnation has a worker that has not decided to
	// return yet; whoever sets it starts one.
	working atomic.Bool
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
	case *Deliveries:
		if ok, free := p.rt.transit[p.index].take(m); ok {
			p.queue(m.Items)
			if free {
				m.release()
			}
		}
	case *actor.Started:
		p.self, p.quit = ctx.Self(), make(chan struct{})
		p.prev = p.rt.lastWorker(p.index)
		// What an incarnation stopped before this one had in its mailbox
		// comes first, in the order it was sent.
		for _, b := range p.rt.transit[p.index].takeAll() {
			p.queue(b.Items)
		}
		// What the last incarnation's worker left on the queue when it quit
		// needs a worker before more comes.
		if p.q.Len() > 0 && p.working.CompareAndSwap(false, true) {
			p.startWorker()
		}
	case *testhook.Crash:
		panic(fmt.Sprintf("amqpactor: %s of %s: %s", partitionName(p.index), p.spec.Address, m.Reason))
	case *actor.Restarting:
		p.panics.Add(1)
		p.stopWorker()
	case *protocol.Describe:
		ctx.Respond(&protocol.Described{Node: &protocol.Node{
			Name: partitionName(p.index), Kind: "partition", PID: ctx.Self().String(),
			State: p.state(), Restarts: int(p.panics.Load()),
			Counters: map[string]uint64{
				"panics":  p.panics.Load(),
				"queued":  uint64(p.q.Len()),
				"running": p.running.Load(),
				"handled": p.handled.Load(),
				"failed":  p.failed.Load(),
			},
		}})
	case *actor.Stopping:
		// The queue is the dispatcher's: it closes it when it stops for
		// good, and otherwise a partition started after this one takes it.
		p.stopWorker()
	}
}

// stopWorker makes this incarnation's worker finish what it took and
// return (once: a stop may follow a restart that was under way).
func (p *partition) stopWorker() {
	if !p.quitting && p.quit != nil {
		p.quitting = true
		close(p.quit)
	}
}

// state is restarting while the worker of an earlier incarnation still
// finishes what it took, attached after.
func (p *partition) state() string {
	if p.prev != nil {
		select {
		case <-p.prev:
			p.prev = nil
		default:
			return protocol.StateRestarting
		}
	}
	return protocol.StateAttached
}

// queue puts items on the queue and makes sure a worker runs for them.
func (p *partition) queue(items []*protocol.Delivery) {
	if !p.q.PushAll(items) {
		return // stopped for good: the link's end gives them back
	}
	if p.working.CompareAndSwap(false, true) {
		p.startWorker()
	}
}

// startWorker starts a worker of this incarnation on the queue; it waits for
// the worker started before it on the same queue, of this incarnation or an
// earlier one, so that one queue never has two workers running at once.
func (p *partition) startWorker() {
	q, quit, done := p.q, p.quit, make(chan struct{})
	prev := p.rt.follow(p.index, done)
	p.env.Go(func() {
		defer close(done)
		if prev != nil {
			<-prev // the last worker finishes what it took
		}
		if p.spec.BatchHandler != nil {
			p.batchWorker(q, quit)
		} else {
			p.worker(q, quit)
		}
	})
}

// idle is a worker's wait with nothing queued: it reports true when the
// worker is to return. A push that comes while it decides either finds
// working unset (and starts a new worker) or is seen here.
func (p *partition) idle(q *workq.Q[*protocol.Delivery]) bool {
	p.working.Store(false)
	if q.Len() == 0 {
		return true
	}
	// Work came meanwhile: carry on, unless the push started a worker.
	return !p.working.CompareAndSwap(false, true)
}

// outbox gathers a worker's outcomes for one Settler and hands them over in
// batches: at the end of what the worker took, before it waits, and when
// the batch is full.
type outbox struct {
	to    protocol.Settler
	link  uint64 // to's link: a Settler is one link's (Delivery.Link)
	ds    []*protocol.Delivery
	from  *actor.PID
	limit int
}

func (o *outbox) add(d *protocol.Delivery, out messages.Outcome) {
	if len(o.ds) > 0 && d.Link != o.link {
		o.flush()
	}
	d.Outcome = out
	o.to, o.link = d.To, d.Link
	o.ds = append(o.ds, d)
	if len(o.ds) >= o.limit {
		o.flush()
	}
}

func (o *outbox) flush() {
	if len(o.ds) == 0 {
		return
	}
	o.to.Settle(o.ds, o.from)
	clear(o.ds)
	o.to, o.ds = nil, o.ds[:0] // the Settler took its own copy
}

// outboxLimit bounds the outcomes one disposition message carries, so that
// credit comes back while a long batch is still being handled.
const outboxLimit = 64

// worker runs the handler for each delivery of q in order, until q is
// closed (what it had taken and not run stays unsettled: its link's end
// gives it back), quit is (it first runs everything it had taken), or
// nothing has come for Env.IdleAfter.
func (p *partition) worker(q *workq.Q[*protocol.Delivery], quit <-chan struct{}) {
	// hctx is the handlers' context: the link's, carrying the partition
	// index; made again only when the link (and so its context) changes.
	var base, hctx context.Context
	// yield is the link of a delivery whose retry a drain interrupted: the
	// rest of what that link handed this partition goes back too, released,
	// rather than overtake it.
	var yield uint64
	out := &outbox{from: p.self, limit: outboxLimit}
	defer out.flush()
	idleAfter := p.idleAfter()
	idle := time.NewTimer(idleAfter)
	defer idle.Stop()
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
		case <-idle.C:
			if p.idle(q) {
				return
			}
			idle.Reset(idleAfter)
			continue
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
				out.add(d, messages.Outcome{Kind: messages.Released})
				continue
			}
			if d.Ctx != base {
				base, hctx = d.Ctx, protocol.WithPartition(d.Ctx, p.info)
			}
			msgs := [1]*messages.Message{d.Message}
			err, stopped := p.attempts(d, msgs[:], out, func() error {
				return p.run(hctx, func(ctx context.Context) error { return p.spec.Handler(ctx, d.Message) })
			})
			if stopped {
				yield = d.Link
			}
			out.add(d, p.spec.Outcome(d.Ctx, err, d.Message))
		}
		out.flush()
		if closed {
			return
		}
		idle.Reset(idleAfter)
	}
}

// batchWorker hands the handler what has arrived, up to the batch size, or
// what arrived within the batch wait after the first delivery.
// On quit it runs what it holds, then returns; with nothing held or queued
// for Env.IdleAfter it returns too.
func (p *partition) batchWorker(q *workq.Q[*protocol.Delivery], quit <-chan struct{}) {
	size := max(min(p.spec.BatchSize, int(p.spec.Credit)), 1)
	wait := p.spec.BatchWait
	if wait <= 0 {
		wait = 50 * time.Millisecond
	}
	var pending []*protocol.Delivery
	out := &outbox{from: p.self, limit: max(size, outboxLimit)}
	defer out.flush()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	idleAfter := p.idleAfter()
	idle := time.NewTimer(idleAfter)
	defer idle.Stop()
	armed := false
	for {
		flush := false
		select {
		case <-idle.C:
			if len(pending) == 0 && !armed && p.idle(q) {
				return
			}
			idle.Reset(idleAfter)
			continue
		case <-q.Ready(): // never closed: Take reports the queue's end
			idle.Reset(idleAfter)
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
				p.runBatch(pending[:n], out)
				pending = pending[n:]
			}
			return
		}
		for flush && len(pending) > 0 {
			n := min(len(pending), size)
			p.runBatch(pending[:n], out)
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

func (p *partition) runBatch(batch []*protocol.Delivery, out *outbox) {
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
	err, _ := p.attempts(live[0], msgs, out, func() error {
		return p.run(ctx, func(ctx context.Context) error { return p.spec.BatchHandler(ctx, msgs) })
	})
	for _, d := range live {
		out.add(d, p.spec.Outcome(d.Ctx, err, d.Message))
	}
	out.flush()
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
// Outcomes waiting in out go first: a wait must not hold back their credit.
func (p *partition) attempts(d *protocol.Delivery, ms []*messages.Message, out *outbox, run func() error) (err error, stopped bool) {
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
		out.flush()
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

func (p *partition) idleAfter() time.Duration {
	if p.env.IdleAfter > 0 {
		return p.env.IdleAfter
	}
	return defaultIdleAfter
}
