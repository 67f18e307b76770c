package receiver

import (
	"context"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors/dispatcher"
	"github.com/amqpactor/amqpactor/internal/deliver"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// PoisonCondition is the error condition a poison message is rejected with.
const PoisonCondition = deliver.PoisonCondition

// Dispositions carries outcomes back from a partition to the receiver
// actor: Items are deliveries of one link, each with its Outcome, in the
// order they were decided. From names the partition, in the message rather
// than as its sender, since a sender costs an envelope per message.
type Dispositions struct {
	Items []*protocol.Delivery
	From  *actor.PID
	link  *deliver.Link
}

// dispositions recycles Dispositions, which the actor puts back once it has
// queued their outcomes: one message per batch of outcomes otherwise
// allocated twice.
var dispositions = sync.Pool{New: func() any { return &Dispositions{Items: make([]*protocol.Delivery, 0, 16)} }}

// relay is one link's way between its data plane and the actors (its
// deliver.Owner): the pump's batches go to the dispatcher, the handlers'
// verdicts and the link's reports come to the receiver actor as messages.
type relay struct {
	// Set before the link starts, never written after.
	root     *actor.RootContext
	self, to *actor.PID
	gen      uint64
	link     *deliver.Link
	// stream, for a stream subscription, is told what the link delivers
	// and what its handlers settled, as the link streamGen.
	stream    *protocol.StreamCursor
	streamGen uint64
	settled   bool // the link's transfers come pre-settled
	// batch is what the pump fills; the pump's alone.
	batch *dispatcher.Deliveries
}

// Settle sends ds's outcomes to the receiver actor; see protocol.Settler.
func (x *relay) Settle(ds []*protocol.Delivery, from *actor.PID) {
	if x.stream != nil {
		for _, d := range ds {
			x.stream.Settled(x.streamGen, d.Raw)
		}
	}
	m := dispositions.Get().(*Dispositions)
	m.Items, m.From, m.link = append(m.Items, ds...), from, x.link
	x.root.Send(x.self, m)
}

func (x *relay) Batch() []*protocol.Delivery {
	x.batch = dispatcher.NewDeliveries()
	return x.batch.Items
}

func (x *relay) Dispatch(ds []*protocol.Delivery) {
	if x.stream != nil {
		if ds = x.skipHandled(ds); len(ds) == 0 {
			return
		}
	}
	b := x.batch
	b.Items, x.batch = ds, nil
	x.root.Send(x.to, b)
}

// skipHandled tells the stream cursor what ds delivers and settles, as
// accepted and without a handler, each one a handler of an earlier link
// settled already or that the subscription's filter values do not want
// (the broker's bloom filter lets some through); it returns the others.
func (x *relay) skipHandled(ds []*protocol.Delivery) []*protocol.Delivery {
	var handled []*protocol.Delivery
	kept := ds[:0]
	for _, d := range ds {
		wanted := x.stream.Wants(d.Raw)
		if x.stream.Delivered(x.streamGen, d.Raw, x.settled || !wanted) || !wanted {
			d.Outcome = messages.Outcome{Kind: messages.Accepted}
			handled = append(handled, d)
			continue
		}
		kept = append(kept, d)
	}
	if handled != nil {
		x.Settle(handled, nil)
	}
	return kept
}

func (x *relay) Idle()           { x.root.Send(x.self, &linkIdle{link: x.gen}) }
func (x *relay) Ended(err error) { x.root.Send(x.self, &linkEnded{link: x.gen, err: err}) }

// startLink starts the data plane of the link that just attached; stream
// is its gen in the subscription's StreamCursor.
func (r *receiver) startLink(self *actor.PID, stream uint64) {
	r.dl = deliver.New(deliver.Config{
		Link: r.link, Gen: r.gen, Base: r.env.Base, Address: r.spec.Address.String(),
		Settled: r.spec.Settled, Credit: r.spec.Credit, Paused: r.paused,
		Budget: r.env.Budget, Holders: &r.env.Holders, Counters: r.Counters,
		Log: r.env.Log, Go: r.env.Go, CloseCtx: r.env.CloseCtx,
	})
	r.dl.Start(&relay{root: r.env.Root, self: self, to: r.to, gen: r.gen, link: r.dl,
		stream: r.spec.Stream, streamGen: stream, settled: r.spec.Settled})
}

// endLink forgets the current link: handler contexts end, unsettled
// deliveries are the broker's again, and the link is closed off the actor;
// why (nil when the receiver stops) is why the node is detached.
func (r *receiver) endLink(ctx context.Context, why error) {
	if r.link == nil {
		return
	}
	link := r.link
	r.link = nil
	r.stopSettleTimer()
	r.leaveBalance()
	dl := r.dl
	r.dl = nil
	dl.End()
	r.closeLink(link, ctx, nil)
	r.set(evDetached, why)
}

func (r *receiver) closeLink(link transport.Receiver, ctx context.Context, done func(error)) {
	env, closed := r.env, make(chan struct{})
	r.kept.closed = closed
	env.Go(func() {
		defer close(closed)
		cctx, cancel := env.CloseCtx(ctx)
		defer cancel()
		err := link.Close(cctx)
		if done != nil {
			done(err)
		}
	})
}
