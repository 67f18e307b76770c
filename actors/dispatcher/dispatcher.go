// Package dispatcher routes a subscription's deliveries to partition workers:
// deliveries with the same group-id go to the same partition and run in
// order, one at a time; different group-ids run in parallel; deliveries
// without a group-id are spread round robin.
package dispatcher

import (
	"hash/maphash"
	"strconv"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/workq"
	"github.com/amqpactor/amqpactor/messages"
)

// New returns the props of the dispatcher of spec.
func New(env *actors.Env, spec *messages.Subscription) *actor.Props {
	return env.Props(func() actor.Actor {
		return &dispatcher{env: env, spec: spec}
	})
}

type dispatcher struct {
	env        *actors.Env
	spec       *messages.Subscription
	partitions []*actor.PID
	queues     []*workq.Q[*messages.Delivery] // partition i's work, in arrival order
	seed       maphash.Seed
	next       int
	routed     uint64
}

func (d *dispatcher) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		d.seed = maphash.MakeSeed()
		n := max(d.spec.Partitions, 1)
		d.partitions = make([]*actor.PID, n)
		d.queues = make([]*workq.Q[*messages.Delivery], n)
		for i := range n {
			d.queues[i] = workq.New[*messages.Delivery]()
			pid, err := ctx.SpawnNamed(newPartition(d.env, d.spec, i, d.queues[i]), "partition-"+strconv.Itoa(i))
			if err != nil {
				panic(err) // a name clash is a bug; let the supervisor see it
			}
			d.partitions[i] = pid
		}
	case *messages.Delivery:
		// Straight onto the partition's queue, not through its mailbox: one
		// hand-over less per delivery. The partition actor owns the worker
		// that drains the queue and closes it when it stops.
		d.routed++
		d.queues[d.pick(m.Message.GroupID)].Push(m)
	case *messages.Describe:
		ctx.Respond(&messages.Described{
			Node: &messages.Node{
				Name: "dispatcher", Kind: "dispatcher", PID: ctx.Self().String(),
				Address: d.spec.Address.String(), State: messages.StateAttached,
				Counters: map[string]uint64{"partitions": uint64(len(d.partitions)), "routed": d.routed},
			},
			Children: d.partitions,
		})
	}
}

func (d *dispatcher) pick(group string) int {
	n := len(d.partitions)
	if n == 1 {
		return 0
	}
	if group == "" {
		d.next = (d.next + 1) % n
		return d.next
	}
	return int(maphash.String(d.seed, group) % uint64(n))
}
