// Package dispatcher routes a subscription's deliveries to partition workers:
// deliveries with the same group-id go to the same partition and run in
// order, one at a time; different group-ids run in parallel; deliveries
// without a group-id are spread round robin.
//
// # Messages
//
// A receiver link's pump (package internal/deliver, through the receiver
// actor's relay) sends the dispatcher actor a *Deliveries with every
// delivery it had at hand; the dispatcher splits it by partition and
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
// partition says restarting until that earlier worker has returned. A
// partition that stops, for whatever reason, never closes its queue: only
// the dispatcher does, when it stops for good (the subscription stops
// it); what is sent then is dropped, and the link ending gives those
// deliveries back to the broker. A dispatcher that panics keeps the queues
// open, so the next incarnation's partitions carry on with them. What a
// stopped partition had in its mailbox is not lost with it: the Router
// keeps every batch sent to a partition until one of its incarnations has
// queued it (Router.transit), and a new incarnation queues the ones still
// in transit first.
//
// # A partition stopped for good
//
// A partition that keeps failing is stopped by its supervisor (the App's
// strategy, applied by the dispatcher), and the dispatcher gets its
// Terminated. It starts partition i again at once, under the same name,
// with the same queue and counters: the dead incarnation's worker settles
// what it took, the new one takes the batches that were in transit to the
// dead one and then the rest of the queue, so every delivery is handled
// and settled once, in group order, and its credit returns to the link.
// Releasing those deliveries to the broker instead would send each back
// to the same partition (group-ids hash to it) and lose their order.
//
// Those starts are bounded by Router.Restarts (10 a minute unless set),
// shared by the partitions and the dispatcher's incarnations. Past it the
// dispatcher fails itself: it panics with an error naming the partition
// and the address, and its own supervisor decides. Under the App's
// strategy that restarts the dispatcher (new partitions, same queues), and
// a dispatcher that keeps failing is stopped, upon which its subscription
// rebuilds itself, or, past its own budget, is reported failed, which
// Health names. So a fault that recurs on every start ends in a failed
// node rather than a loop, and each level keeps its own budget. A
// strategy that resumes the dispatcher instead chose to carry on: the next
// batch for the partition starts it again. The
// dispatcher's node draws only live partitions, says restarting while one
// is stopped and not yet started again, counts the starts (replaced) and
// keeps the last stop's reason (LastError).
package dispatcher

import (
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/internal/workq"
)

// defaultIdleAfter is how long a partition's worker waits with nothing
// queued before it returns (Env.IdleAfter overrides it); the next delivery
// starts a new one.
const defaultIdleAfter = time.Second

// Deliveries is a batch of deliveries in arrival order: from a link's pump
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
	routed  atomic.Uint64

	// Restarts is the budget for starting a partition again after its
	// supervisor stopped it, shared by every partition and every
	// incarnation of the dispatcher; the zero value allows 10 a minute.
	// Set it before the dispatcher is spawned; after that only the
	// dispatcher's mailbox run (of any incarnation) touches it.
	Restarts actors.Restarts

	// next (the round robin), replaced (partitions started again) and
	// lastErr (why a partition was last stopped) are ONLY touched by the
	// dispatcher's mailbox run, of whichever incarnation.
	next     uint64
	replaced uint64
	lastErr  error

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

// lastWorker returns the done channel of the last worker started on queue
// i, nil when none was.
func (r *Router) lastWorker(i int) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[i]
}

// close ends every queue: the dispatcher stops for good.
func (r *Router) close() {
	for _, q := range r.queues {
		q.Close()
	}
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

// dispatcher's fields are ONLY touched by its mailbox run.
type dispatcher struct {
	env  *actors.Env
	spec *protocol.SubscriptionSpec
	rt   *Router
	// partitions[i] is partition i's actor; nil from its stop until it is
	// started again (its batches then wait in Router.transit).
	partitions []*actor.PID
	// props[i] starts partition i, again too: its counters carry on.
	props []*actor.Props
	split []*Deliveries // per partition, while routing one batch
	// exiting: this incarnation restarts or stops, and its partitions with it.
	exiting bool
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

// send hands b to partition i. It stays in transit until an incarnation of
// the partition queues it, so that one started after this one stopped
// queues it instead.
func (d *dispatcher) send(ctx actor.Context, i int, b *Deliveries) {
	b.queued = false
	d.rt.transit[i].add(b)
	if d.partitions[i] == nil {
		// Only a supervisor that resumed this dispatcher after it failed
		// for partition i leaves it unstarted: it chose to carry on.
		d.spawn(ctx, i)
		d.rt.replaced++
	}
	ctx.Send(d.partitions[i], b)
}

func partitionName(i int) string { return "partition-" + strconv.Itoa(i) }

// spawn starts partition i; what is in transit to it is queued first.
func (d *dispatcher) spawn(ctx actor.Context, i int) {
	pid, err := ctx.SpawnNamed(d.props[i], partitionName(i))
	if err != nil {
		panic(err) // a name clash is a bug; let the supervisor see it
	}
	d.partitions[i] = pid
}

// onTerminated: a partition stopped that this incarnation did not stop, so
// its supervisor did (its restart budget spent). Its queue and the batches
// in transit to it are intact: a new incarnation takes them over, in order,
// after the dead one's worker has finished and settled what it took.
// Past the Router's budget the dispatcher fails instead (see Restarts in
// the package documentation).
func (d *dispatcher) onTerminated(ctx actor.Context, m *actor.Terminated) {
	if d.exiting {
		return
	}
	i := slices.IndexFunc(d.partitions, func(p *actor.PID) bool { return p != nil && p.Equal(m.Who) })
	if i < 0 {
		return
	}
	d.partitions[i] = nil
	addr := d.spec.Address.String()
	err := fmt.Errorf("amqpactor: dispatcher of %s: %s was stopped by its supervisor after repeated failures", addr, partitionName(i))
	d.rt.lastErr = err
	if !d.rt.Restarts.Spend(time.Now()) {
		d.log().Error("amqpactor: a partition spent the dispatcher's restart budget; failing the dispatcher",
			"address", addr, "partition", i)
		panic(fmt.Errorf("%w, and the restart budget for its partitions is spent", err))
	}
	d.log().Warn("amqpactor: a partition was stopped by its supervisor; starting it again",
		"address", addr, "partition", i)
	d.rt.replaced++
	d.spawn(ctx, i)
}

// log is the App's logger; an Env built without one (a test's) logs to
// slog's default.
func (d *dispatcher) log() *slog.Logger {
	if d.env.Log != nil {
		return d.env.Log
	}
	return slog.Default()
}

func (d *dispatcher) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		// The partitions of a previous incarnation were stopped by now
		// (protoactor restarts an actor once its children have stopped):
		// the queues are this one's.
		n := len(d.rt.queues)
		d.partitions, d.props, d.split = make([]*actor.PID, n), make([]*actor.Props, n), make([]*Deliveries, n)
		for i := range n {
			d.props[i] = newPartition(d.env, d.spec, i, d.rt)
			d.spawn(ctx, i)
		}
	case *Deliveries:
		d.route(ctx, m)
	case *actor.Terminated:
		d.onTerminated(ctx, m)
	case *testhook.Crash:
		panic("amqpactor: dispatcher " + d.spec.Address.String() + ": " + m.Reason)
	case *actor.Restarting:
		// Its partitions stop next; the queues stay open for the next
		// incarnation's.
		d.exiting = true
		d.rt.panics.Add(1)
	case *actor.Stopping:
		// For good: what the partitions' workers have not taken stays
		// unsettled, and the link's end gives it back.
		d.exiting = true
		d.rt.close()
	case *protocol.Describe:
		ctx.Respond(d.describe(ctx))
	}
}

// describe draws the dispatcher as protoactor knows its partitions: a
// partition stopped and not started again yet is not drawn, and the
// dispatcher says restarting meanwhile.
func (d *dispatcher) describe(ctx actor.Context) *protocol.Described {
	state := protocol.StateAttached
	children := make([]*actor.PID, 0, len(d.partitions))
	for _, pid := range d.partitions {
		if pid == nil {
			state = protocol.StateRestarting
			continue
		}
		if _, alive := ctx.ActorSystem().ProcessRegistry.GetLocal(pid.Id); !alive {
			state = protocol.StateRestarting
			continue
		}
		children = append(children, pid)
	}
	n := &protocol.Node{
		Name: "dispatcher", Kind: "dispatcher", PID: ctx.Self().String(),
		Address: d.spec.Address.String(), State: state, Restarts: int(d.rt.panics.Load()),
		Counters: map[string]uint64{"partitions": uint64(len(d.partitions)), "routed": d.rt.routed.Load(),
			"panics": d.rt.panics.Load(), "replaced": d.rt.replaced},
	}
	if d.rt.lastErr != nil {
		n.LastError = d.rt.lastErr.Error()
	}
	return &protocol.Described{Node: n, Children: children}
}
