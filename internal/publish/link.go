package publish

import (
	"sync/atomic"

	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/workq"
	"github.com/amqpactor/amqpactor/transport"
)

// Config is what one link generation's goroutines need.
type Config struct {
	// Link is the attached transport link the writer sends on.
	Link transport.Sender
	// Gen is the link's generation, which every Ended carries back.
	Gen uint64
	// Anonymous says Link is the anonymous terminus: each publish names its
	// own address, which the link's transport.Relay sends to.
	Anonymous bool
	// Lane is opened once what waited is queued on the writer.
	Lane *Lane
	// Counts is where the goroutines count; it outlives the Link.
	Counts *Counts
	// Ended takes what the link gave back when it died. The writer and the
	// confirmer call it, once each at most, so it must not block.
	Ended func(*Ended)
	// Go starts a goroutine that whoever stops the runtime waits for.
	Go func(func())
}

// Ended is what a dead link's writer or confirmer hands back: Unsent, for
// the next link. Written says they were written but never confirmed (from
// the confirmer); they go before everything else.
type Ended struct {
	Gen     uint64
	Err     error
	Unsent  []*protocol.Publish
	Written bool
}

// Counts are a sender's publish counters: its describe and idle check
// read them from the actor's goroutine.
type Counts struct {
	// Added by the writer and the confirmer.
	Published, Confirmed, Failed atomic.Uint64
	// Resent counts the written-but-unconfirmed publishes Start sent
	// again; added by the actor.
	Resent atomic.Uint64
}

// job is what the writer and the confirmer see: a publish, or a marker
// (done) that follows every earlier publish through both goroutines.
type job struct {
	p       *protocol.Publish
	receipt transport.Receipt
	done    chan<- error
}

// Link is one link generation's writer and confirmer.
type Link struct {
	// Set by Start, read-only after.
	link   transport.Sender
	relay  transport.Relay // link, when it is the anonymous terminus
	gen    uint64
	lane   *Lane
	counts *Counts
	ended  func(*Ended)

	// wq: the actor (Push) and the Lane (Offer) push, the writer takes;
	// the actor closes it (Stop, Finish).
	wq *workq.Q[job]
	// cq: the writer pushes and closes it, the confirmer takes.
	cq *workq.Q[job]
	// done is closed by the confirmer when it returns.
	done chan struct{}
}

// Start starts the writer and the confirmer of c.Link, queues what waits in
// w on it (the written-but-unconfirmed first), and opens c.Lane.
func Start(c Config, w *Waiting) *Link {
	k := &Link{link: c.Link, gen: c.Gen, lane: c.Lane, counts: c.Counts, ended: c.Ended,
		wq: workq.New[job](), cq: workq.New[job](), done: make(chan struct{})}
	if c.Anonymous {
		k.relay, _ = c.Link.(transport.Relay)
	}
	c.Go(k.write)
	c.Go(k.confirm)
	w.Add(c.Lane.TakeParked()...)
	for _, p := range w.resend {
		c.Counts.Resent.Add(1)
		k.wq.Push(job{p: p})
	}
	for _, p := range w.pending {
		k.wq.Push(job{p: p})
	}
	w.resend, w.pending = nil, nil
	c.Lane.q.Store(k.wq)
	return k
}

// Sender is the transport link; the actor closes it.
func (k *Link) Sender() transport.Sender { return k.link }

// Push queues p on the writer.
func (k *Link) Push(p *protocol.Publish) bool { return k.wq.Push(job{p: p}) }

// Queued counts the publishes the writer has yet to take.
func (k *Link) Queued() int { return k.wq.Len() }

// Done is closed once the confirmer has returned: every publish handed to
// the Link is answered or handed back.
func (k *Link) Done() <-chan struct{} { return k.done }

// Stop ends the Link at once, the link having died: the lane closes, then
// the writer's queue, and the publishes the writer has not taken join w.
// The lane closes first, so that nothing offered on it lands after the
// last Take. The writer and the confirmer hand back the rest (Ended).
func (k *Link) Stop(w *Waiting) {
	k.lane.Close()
	k.wq.Close()
	rest, _ := k.wq.Take()
	for _, j := range rest {
		if j.p != nil {
			w.Add(j.p)
		}
	}
}

// Finish lets the writer and the confirmer finish what they were handed:
// the lane closes, and a marker queued last follows every publish through
// both, which return after it. The confirmer sends nil on done when it
// reaches the marker; the writer sends the link's error if the link dies
// first.
func (k *Link) Finish(done chan<- error) {
	// Nothing offered on the lane may follow the marker: it would be
	// written after the confirmations the marker waits for.
	k.lane.Close()
	k.wq.PushClose(job{done: done})
}
