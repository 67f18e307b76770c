// Package dispatcher routes a subscription's deliveries to partition workers:
// deliveries with the same group-id go to the same partition and run in
// order, one at a time; different group-ids run in parallel; deliveries
// without a group-id are spread round robin.
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
// with the same queues. A partition stopped for good (the subscription
// stops the dispatcher) closes its queue, as before: Route then drops, and
// the link ending gives those deliveries back to the broker.
package dispatcher

import (
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/workq"
)

// Router puts a subscription's deliveries on its partitions' queues. The
// receiver calls Route itself, so a delivery goes from the receiver straight
// to the worker that runs its handler, with no actor mailbox in between;
// the dispatcher actor only owns the partitions. Route is safe for
// concurrent use: a replaced receiver may still be stopping while its
// successor starts.
type Router struct {
	queues []*workq.Q[*protocol.Delivery] // partition i's work, in arrival order
	seed   maphash.Seed
	next   atomic.Uint64
	routed atomic.Uint64

	// handover: the dispatcher is restarting, its partitions stop to be
	// replaced; their queues stay open.
	handover atomic.Bool
	// last[i] is closed when the last worker started on queue i returns.
	mu   sync.Mutex
	last []chan struct{}
	// panics counts the dispatcher's restarts (its node shows them).
	panics atomic.Uint64
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
	r := &Router{seed: maphash.MakeSeed(), queues: make([]*workq.Q[*protocol.Delivery], max(spec.Partitions, 1))}
	r.last = make([]chan struct{}, len(r.queues))
	for i := range r.queues {
		r.queues[i] = workq.New[*protocol.Delivery]()
	}
	return r
}

// Route hands d to its partition. It never blocks; once the partitions
// have stopped it drops d, whose link ends with them (the broker redelivers).
func (r *Router) Route(d *protocol.Delivery) {
	r.routed.Add(1)
	r.queues[r.pick(d.Message.GroupID)].Push(d)
}

func (r *Router) pick(group string) int {
	n := uint64(len(r.queues))
	if n == 1 {
		return 0
	}
	if group == "" {
		return int(r.next.Add(1) % n)
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
}

func (d *dispatcher) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		// Its partitions were stopped by now (protoactor restarts an actor
		// once its children have stopped): the queues are theirs again.
		d.rt.handover.Store(false)
		d.partitions = make([]*actor.PID, len(d.rt.queues))
		for i := range d.rt.queues {
			pid, err := ctx.SpawnNamed(newPartition(d.env, d.spec, i, d.rt), "partition-"+strconv.Itoa(i))
			if err != nil {
				panic(err) // a name clash is a bug; let the supervisor see it
			}
			d.partitions[i] = pid
		}
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
