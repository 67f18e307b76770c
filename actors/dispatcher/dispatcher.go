// Package dispatcher routes a subscription's deliveries to partition workers:
// deliveries with the same group-id go to the same partition and run in
// order, one at a time; different group-ids run in parallel; deliveries
// without a group-id are spread round robin.
//
// # Messages
//
// The receiver actor sends the dispatcher actor a *Deliveries with every
// delivery its pump had at hand; the dispatcher splits it by partition and
// sends each partition actor its share as one *Deliveries; the partition
// actor puts them on its queue, which its worker goroutine takes from, so a
// handler never runs in a mailbox. The worker hands the outcomes back to
// each delivery's Settler (protocol.Settler), which sends them to the
// receiver actor as one disposition message naming the partition (receiver.Dispositions.From).
//
// # Workers come and go
//
// A partition's worker is started by its actor when work arrives and no
// worker runs, and returns once it has waited Env.IdleAfter with nothing
// queued, so an idle subscription keeps no goroutine per partition. Every
// worker started on a queue waits for the one started before it
// (Router.follow), so two never run one queue at once.
//
// # Restarts
//
// The Router and its queues belong to the subscription and outlive every
// incarnation of the dispatcher and its partitions; a worker goroutine
// belongs to one partition incarnation. A partition that panics is
// restarted by the dispatcher: on Restarting its worker is told to quit,
// finishes (handles and settles, in order) what it had already taken and
// returns; the next incarnation's worker waits for it, then takes the rest
// of the same queue, so group-id order holds and nothing is dropped. A
// dispatcher that panics marks its Router as handed over before its
// partitions are stopped, so they quit their workers the same way instead
// of closing their queues, and the next incarnation's partitions carry on
// with the same queues. What a stopped partition had in its mailbox is not
// lost with it: the Router keeps every batch sent to a partition until one
// of its incarnations has queued it (Router.transit), and a new
// incarnation queues the ones still in transit first. A partition stopped
// for good (the subscription stops the dispatcher) closes its queue, as
// before: what is sent to it then is dropped, and the link ending gives
// those deliveries back to the broker.
package dispatcher

import (
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/workq"
)

// defaultIdleAfter is how long a partition's worker waits with nothing
// queued before it returns (Env.IdleAfter overrides it); the next delivery
// starts a new one.
const defaultIdleAfter = time.Second

// Deliveries is a batch of deliveries in arrival order: from the receiver
// to the dispatcher (any partitions), and from the dispatcher to one
// partition (its own). The actor that receives it owns it, and recycles it
// once done (NewDeliveries).
type Deliveries struct {
	Items []*protocol.Delivery
	// queued: a partition incarnation has put Items on its queue (guarded
	// by the partition's transit lock).
	queued bool
}

// batches recycles Deliveries: a message and its slice per batch were most
// of what the hops between the actors allocate.
var batches = sync.Pool{New: func() any { return &Deliveries{Items: make([]*protocol.Delivery, 0, 16)} }}

// NewDeliveries returns an empty batch, possibly one released before.
func NewDeliveries() *Deliveries { return batches.Get().(*Deliveries) }

// release recycles b; nothing may refer to it any more.
func (b *Deliveries) release() {
	clear(b.Items)
	b.Items, b.queued = b.Items[:0], false
	batches.Put(b)
}

// Router is what a subscription's dispatcher incarnations share: the
// partitions' queues and the group-id hash. Only the dispatcher actor
// routes (see Messages in the package documentation).
type Router struct {
	queues  []*workq.Q[*protocol.Delivery] // partition i's work, in arrival order
	transit []transit                      // partition i's batches sent, not queued yet
	seed    maphash.Seed
	next    uint64 // round robin; only the dispatcher's mailbox run touches it
	routed  atomic.Uint64

	// handover: the dispatcher is restarting, its partitions stop to be
	// replaced; their queues stay open.
	handover atomic.Bool
	// last[i] is closed when the last worker started on queue i returns.
	mu   sync.Mutex
	last []chan struct{}
	// panics counts the dispatcher's restarts (its node shows them).
	panics atomic.Uint64
}

// transit keeps one partition's batches from the dispatcher's send until a
// partition incarnation has queued them: a partition stopped by its
// dispatcher's restart drops what its mailbox holds, and the next
// incarnation queues those batches instead.
type transit struct {
	mu   sync.Mutex
	sent []*Deliveries
}

// maxKeptTransit is the capacity past which an emptied transit list lets
// its array go.
const maxKeptTransit = 64

func (t *transit) add(b *Deliveries) {
	t.mu.Lock()
	t.sent = append(t.sent, b)
	t.mu.Unlock()
}

// take marks b queued by the caller, and reports false when an incarnation
// queued it already (takeAll). free says that transit no longer refers to
// b, so that the caller may recycle it once queued.
func (t *transit) take(b *Deliveries) (ok, free bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b.queued {
		return false, false
	}
	b.queued = true
	// Batches arrive in the order sent: the queued ones are the oldest.
	n := 0
	for n < len(t.sent) && t.sent[n].queued {
		free = free || t.sent[n] == b
		t.sent[n] = nil
		n++
	}
	// Moved down rather than resliced, so that a quiet link reuses one
	// small array instead of allocating a batch's slot each time.
	rest := copy(t.sent, t.sent[n:])
	clear(t.sent[rest:])
	t.sent = t.sent[:rest]
	if rest == 0 && cap(t.sent) > maxKeptTransit {
		t.sent = nil // one burst does not pin its size
	}
	return true, free
}

// takeAll marks every batch in transit queued by the caller and returns
// them, oldest first.
func (t *transit) takeAll() []*Deliveries {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*Deliveries
	for _, b := range t.sent {
		if !b.queued {
			b.queued = true
			out = append(out, b)
		}
	}
	t.sent = nil
	return out
}

// follow records done as queue i's worker, and returns its predecessor's.
func (r *Router) follow(i int, done chan struct{}) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.last[i]
	r.last[i] = done
	return prev
}

// NewRouter returns the router of spec, with one queue per partition.
func NewRouter(spec *protocol.SubscriptionSpec) *Router {
	n := max(spec.Partitions, 1)
	r := &Router{seed: maphash.MakeSeed(), queues: make([]*workq.Q[*protocol.Delivery], n), transit: make([]transit, n)}
	r.last = make([]chan struct{}, n)
	for i := range r.queues {
		r.queues[i] = workq.New[*protocol.Delivery]()
	}
	return r
}

func (r *Router) pick(group string) int {
	n := uint64(len(r.queues))
	if n == 1 {
		return 0
	}
	if group == "" {
		r.next++
		return int(r.next % n)
	}
	return int(maphash.String(r.seed, group) % n)
}

// New returns the props of the dispatcher of spec: it spawns a partition
// for each of rt's queues.
func New(env *actors.Env, spec *protocol.SubscriptionSpec, rt *Router) *actor.Props {
	return env.Props(func() actor.Actor {
		return &dispatcher{env: env, spec: spec, rt: rt}
	})
}

type dispatcher struct {
	env        *actors.Env
	spec       *protocol.SubscriptionSpec
	rt         *Router
	partitions []*actor.PID
	split      []*Deliveries // per partition, while routing one batch
}

// route sends each partition its share of ds, in order, as one message.
func (d *dispatcher) route(ctx actor.Context, m *Deliveries) {
	d.rt.routed.Add(uint64(len(m.Items)))
	if len(d.partitions) == 1 {
		d.send(ctx, 0, m)
		return
	}
	for _, dl := range m.Items {
		i := d.rt.pick(dl.Message.GroupID)
		if d.split[i] == nil {
			d.split[i] = NewDeliveries()
		}
		d.split[i].Items = append(d.split[i].Items, dl)
	}
	m.release()
	for i, b := range d.split {
		if b != nil {
			d.send(ctx, i, b)
			d.split[i] = nil // the partition owns it now
		}
	}
}

func (d *dispatcher) send(ctx actor.Context, i int, b *Deliveries) {
	b.queued = false
	d.rt.transit[i].add(b)
	ctx.Send(d.partitions[i], b)
}

func (d *dispatcher) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		// Its partitions were stopped by now (protoactor restarts an actor
		// once its children have stopped): the queues are theirs again.
		d.rt.handover.Store(false)
		d.partitions = make([]*actor.PID, len(d.rt.queues))
		d.split = make([]*Deliveries, len(d.rt.queues))
		for i := range d.rt.queues {
			pid, err := ctx.SpawnNamed(newPartition(d.env, d.spec, i, d.rt), "partition-"+strconv.Itoa(i))
			if err != nil {
				panic(err) // a name clash is a bug; let the supervisor see it
			}
			d.partitions[i] = pid
		}
	case *Deliveries:
		d.route(ctx, m)
	case *actors.Crash:
		panic("amqpactor: dispatcher " + d.spec.Address.String() + ": " + m.Reason)
	case *actor.Restarting:
		// Before protoactor stops the partitions: they hand their queues
		// over instead of closing them.
		d.rt.panics.Add(1)
		d.rt.handover.Store(true)
	case *protocol.Describe:
		ctx.Respond(&protocol.Described{
			Node: &protocol.Node{
				Name: "dispatcher", Kind: "dispatcher", PID: ctx.Self().String(),
				Address: d.spec.Address.String(), State: protocol.StateAttached, Restarts: int(d.rt.panics.Load()),
				Counters: map[string]uint64{"partitions": uint64(len(d.partitions)), "routed": d.rt.routed.Load(),
					"panics": d.rt.panics.Load()},
			},
			Children: d.partitions,
		})
	}
}
