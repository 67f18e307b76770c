package publish

import "github.com/amqpactor/amqpactor/internal/protocol"

// Waiting is what waits for a link, owned by the sender actor: publishes
// never handed to a writer, and publishes written on a dead link that never
// brought their outcome, which go first on the next link (at-least-once:
// the copy keeps its message-id). Start empties it onto the new Link.
type Waiting struct {
	pending []*protocol.Publish // never written, in arrival order
	resend  []*protocol.Publish // written, unconfirmed, in send order
}

// Add puts ps after everything that waits.
func (w *Waiting) Add(ps ...*protocol.Publish) { w.pending = append(w.pending, ps...) }

// Keep takes publishes a dead link's goroutines handed back (Ended):
// written-but-unconfirmed ones after earlier ones of their kind, unsent
// ones before what waited already, which came after them.
func (w *Waiting) Keep(ps []*protocol.Publish, written bool) {
	if written {
		w.resend = append(w.resend, ps...)
		return
	}
	w.pending = append(ps, w.pending...)
}

// Len counts what waits.
func (w *Waiting) Len() int { return len(w.pending) + len(w.resend) }

// Hand empties w, calling f with each publish in the order the next link
// would send them.
func (w *Waiting) Hand(f func(*protocol.Publish)) {
	for _, p := range w.resend {
		f(p)
	}
	for _, p := range w.pending {
		f(p)
	}
	w.resend, w.pending = nil, nil
}

// Fail answers everything that waits with err.
func (w *Waiting) Fail(err error) {
	w.Hand(func(p *protocol.Publish) { p.Answer(err) })
}

// Prune answers the publishes whose context has ended: their callers have
// returned already, and nothing of them was confirmed.
func (w *Waiting) Prune() {
	keep := func(ps []*protocol.Publish) []*protocol.Publish {
		out := ps[:0]
		for _, p := range ps {
			if err := p.Ctx.Err(); err != nil {
				p.Answer(err)
				continue
			}
			out = append(out, p)
		}
		clear(ps[len(out):])
		return out
	}
	w.resend, w.pending = keep(w.resend), keep(w.pending)
}
