// Package dispatcher routes a subscription's deliveries to partition workers:
// deliveries with the same group-id go to the same partition and run in
// order, one at a time; different group-ids run in parallel; deliveries
// without a group-id are spread round robin.
package dispatcher

import (
	"hash/maphash"
	"strconv"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/workq"
	"github.com/amqpactor/amqpactor/messages"
)

// Router puts a subscription's deliveries on its partitions' queues. The
// receiver calls Route itself, so a delivery goes from the receiver straight
// to the worker that runs its handler, with no actor mailbox in between;
// the dispatcher actor only owns the partitions. Route is safe for
// concurrent use: a replaced receiver may still be stopping while its
// successor starts.
type Router struct {
	queues []*workq.Q[*messages.Delivery] // partition i's work, in arrival order
	seed   maphash.Seed
	next   atomic.Uint64
	routed atomic.Uint64
}

// NewRouter returns the router of spec, with one queue per partition.
func NewRouter(spec *messages.Subscription) *Router {
	r := &Router{seed: maphash.MakeSeed(), queues: make([]*workq.Q[*messages.Delivery], max(spec.Partitions, 1))}
	for i := range r.queues {
		r.queues[i] = workq.New[*messages.Delivery]()
	}
	return r
}

// Route hands d to its partition. It never blocks; once the partitions
// have stopped it drops d, whose link ends with them (the broker redelivers).
func (r *Router) Route(d *messages.Delivery) {
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
func New(env *actors.Env, spec *messages.Subscription, rt *Router) *actor.Props {
	return env.Props(func() actor.Actor {
		return &dispatcher{env: env, spec: spec, rt: rt}
	})
}

type dispatcher struct {
	env        *actors.Env
	spec       *messages.Subscription
	rt         *Router
	partitions []*actor.PID
}

func (d *dispatcher) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		d.partitions = make([]*actor.PID, len(d.rt.queues))
		for i, q := range d.rt.queues {
			pid, err := ctx.SpawnNamed(newPartition(d.env, d.spec, i, q), "partition-"+strconv.Itoa(i))
			if err != nil {
				panic(err) // a name clash is a bug; let the supervisor see it
			}
			d.partitions[i] = pid
		}
	case *messages.Describe:
		ctx.Respond(&messages.Described{
			Node: &messages.Node{
				Name: "dispatcher", Kind: "dispatcher", PID: ctx.Self().String(),
				Address: d.spec.Address.String(), State: messages.StateAttached,
				Counters: map[string]uint64{"partitions": uint64(len(d.partitions)), "routed": d.rt.routed.Load()},
			},
			Children: d.partitions,
		})
	}
}
