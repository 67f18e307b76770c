package sender

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/internal/protocol"
)

func (s *sender) describe(ctx actor.Context) *protocol.Described {
	n := &protocol.Node{
		Name: s.name(), Kind: "sender", PID: ctx.Self().String(),
		Address: s.label(), State: s.st.String(), Restarts: s.restarts + int(s.kept.panics.Load()),
		Counters: map[string]uint64{
			"panics":    s.kept.panics.Load(),
			"published": s.counts.Published.Load(),
			"confirmed": s.counts.Confirmed.Load(),
			"failed":    s.counts.Failed.Load(),
			"waiting":   uint64(s.waiting.Len()),
			"resent":    s.counts.Resent.Load(),
		},
	}
	if s.link != nil {
		n.Address += " (" + s.link.Sender().Address() + ")"
	}
	if s.lastErr != nil {
		n.LastError = s.lastErr.Error()
	}
	return &protocol.Described{Node: n}
}
