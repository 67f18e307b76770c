package receiver

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
)

// describe is the receiver's node in the tree: its state and counters.
func (r *receiver) describe(ctx actor.Context) *protocol.Described {
	n := &protocol.Node{
		Name:     "receiver",
		Kind:     "receiver",
		PID:      ctx.Self().String(),
		Address:  r.spec.Address.String(),
		State:    r.st.String(),
		Restarts: r.restarts + int(r.kept.panics.Load()),
		Counters: map[string]uint64{
			"panics":    r.kept.panics.Load(),
			"credit":    uint64(r.spec.Credit),
			"unsettled": r.unsettled(),
			"delivered": r.Delivered.Load(),
			"accepted":  r.ByOutcome[messages.Accepted].Load(),
			"rejected":  r.ByOutcome[messages.Rejected].Load(),
			"released":  r.ByOutcome[messages.Released].Load(),
			"modified":  r.ByOutcome[messages.Modified].Load(),
			"late":      r.Dropped.Load(),
			"poison":    r.Poison.Load(),
			// Deliveries the broker settled while a handler held them.
			"broker_settled": r.BrokerSettled.Load(),
		},
	}
	if r.dl != nil {
		if b, ok := r.dl.Bytes(); ok {
			// Held and reserved: what this link counts in the App's budget.
			n.Counters["inflight_bytes"] = uint64(max(b, 0))
		}
	}
	if r.link != nil {
		n.Address += " (" + r.link.Address() + ")"
	}
	if r.paused {
		n.Counters["paused"] = 1
	}
	if r.activeKnown {
		n.Counters["active"] = 0
		if r.isActive {
			n.Counters["active"] = 1
		}
	} else if r.deliveredSinceAttach() {
		// The broker says nothing, but delivered to this link.
		n.Counters["active"] = 1
	}
	if r.lastErr != nil {
		n.LastError = r.lastErr.Error()
	}
	return &protocol.Described{Node: n}
}

func (r *receiver) unsettled() uint64 {
	if r.dl == nil {
		return 0
	}
	return r.dl.Unsettled()
}
