package receiver

import (
	"context"
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/transport"
)

// Balancing the partition queues of a Partitioned subscription across the
// replicas of one App (the Apps of one name, each attached to every
// partition queue; the broker delivers each queue to one of them, its
// single active consumer, and the others wait in line). No membership of
// our own: the number of replicas k is the consumer count the broker
// reports of a census queue, to which partition 0's receiver of each replica
// attaches a link nothing reads; each replica holds its fair share,
// ceil(n/k), or fewer. Partition 0's receiver polls the count and, where
// this replica holds more, asks as many of its active partitions to hand
// over (protocol.Handover): each stops taking deliveries, waits until what
// it took is settled, detaches, and attaches again at the back of the line,
// so the broker activates the next replica waiting, never two at once. A
// replica that got more than its share so hands the surplus on in turn.
//
// The census is only as true as the queue's consumers: any client that may
// consume there can inflate it, and then no replica can hold its share and
// the partitions go round. So a replica that sees a partition it handed
// over come straight back, or hands over more than twice the partitions in a
// minute, stops handing over for a while, keeps what it holds and warns,
// naming the census queue (protocol.Balance.MayHandOver).

// StateHandingOver is the state of a receiver giving its partition queue to
// another replica: it takes no new deliveries and waits for what it took to
// be settled before it detaches.
const StateHandingOver = "handing-over"

// balanceEvery is how often partition 0's receiver reads the consumer count.
const balanceEvery = time.Second

// handingFor bounds how long a hand-over asked for keeps the next ones
// waiting: one whose receiver restarted meanwhile never reports back.
const handingFor = 30 * time.Second

type (
	// balanceTick: time to read the consumer count; who is the
	// incarnation that scheduled it.
	balanceTick struct{ who *receiver }
	// censusAttached: the census link attached (or not) for link gen.
	censusAttached struct {
		who  *receiver
		gen  uint64
		link transport.Receiver
		err  error
	}
	// consumersRead: the consumer count of the census queue.
	consumersRead struct {
		who *receiver
		n   int
		err error
	}
)

// joinBalance records the new link in the subscription's Balance: whether
// this replica holds the partition is what the broker said of the link
// (rabbitmq:active) or, where it says nothing (RabbitMQ 4.0), whether the
// link got a delivery, which a single-active-consumer queue sends only to
// its active consumer. Partition 0's receiver starts polling.
func (r *receiver) joinBalance(ctx actor.Context, la *linkActive) {
	b := r.spec.Balance
	if b == nil || la == nil {
		return
	}
	r.self = ctx.Self()
	delivered := &r.Delivered
	base := delivered.Load()
	r.attachDelivered = base
	b.Set(r.spec.Partition, protocol.BalancePart{PID: r.self, Held: func() bool {
		switch la.said.Load() {
		case 1:
			return true
		case 2:
			return false
		}
		return delivered.Load() > base
	}})
	if r.spec.Partition == 0 {
		r.attachCensus(ctx)
		if r.balTimer == nil {
			r.scheduleBalance(ctx)
		}
	}
}

// inLine reports whether every partition queue has this replica's link:
// only then does its census link count it, so that no replica hands a
// partition to a newcomer the broker cannot yet activate, and sees it come
// back as if the census were wrong.
func (b balanceParts) inLine() bool {
	for _, p := range b {
		if p.PID == nil {
			return false
		}
	}
	return len(b) > 0
}

type balanceParts []protocol.BalancePart

// deliveredSinceAttach reports whether the link got a delivery: on a
// single-active-consumer queue whose broker does not say which consumer is
// active (RabbitMQ 4.0), that it is.
func (r *receiver) deliveredSinceAttach() bool {
	return r.link != nil && r.spec.Balance != nil && r.Delivered.Load() > r.attachDelivered
}

// leaveBalance forgets the link in the Balance, and partition 0's receiver
// its census link.
func (r *receiver) leaveBalance() {
	if b := r.spec.Balance; b != nil && r.self != nil {
		b.Clear(r.spec.Partition, r.self)
	}
	r.closeCensus()
}

func (r *receiver) closeCensus() {
	if c := r.census; c != nil {
		r.census = nil
		env := r.env
		env.Go(func() {
			cctx, cancel := env.CloseCtx(context.Background())
			defer cancel()
			_ = c.Close(cctx)
		})
	}
}

// attachCensus attaches, beside partition 0's link and once this replica
// has a link on every partition queue, a receiver with one credit and no
// reader to the subscription's census queue (Balance.Census, a plain
// queue nothing is sent to): its consumer count is the number of replicas,
// which a single-active-consumer queue's is not (RabbitMQ counts only its
// active consumer there).
func (r *receiver) attachCensus(ctx actor.Context) {
	if r.census != nil || r.censusGen == r.gen || !balanceParts(r.spec.Balance.Parts()).inLine() {
		// Attached, on its way, or not yet in line on every queue: the
		// next balance tick tries again.
		return
	}
	r.censusGen = r.gen
	self, sess, env, gen := ctx.Self(), r.sess, r.env, r.gen
	o := transport.ReceiverOptions{Address: r.spec.Balance.Census, Credit: 1, ClassicQueue: true}
	env.Go(func() {
		actx, cancel := env.AttachCtx(nil)
		defer cancel()
		link, err := sess.NewReceiver(actx, o)
		if err == nil {
			// One credit: a 0-9-1 consumer is counted only once it
			// consumes; nothing is sent to the census queue.
			err = link.IssueCredit(1)
			if err != nil {
				cctx, ccancel := env.CloseCtx(context.Background())
				_ = link.Close(cctx)
				ccancel()
				link = nil
			}
		}
		env.Root.Send(self, &censusAttached{who: r, gen: gen, link: link, err: err})
	})
}

func (r *receiver) onCensusAttached(m *censusAttached) {
	if m.err != nil {
		r.env.Log.Warn("amqpactor: partitions not balanced: the census queue refused the attach", "address", r.spec.Balance.Census.String(), "error", m.err)
		return
	}
	if m.who != r || m.gen != r.gen || r.link == nil || r.census != nil {
		env, c := r.env, m.link
		env.Go(func() {
			cctx, cancel := env.CloseCtx(context.Background())
			defer cancel()
			_ = c.Close(cctx)
		})
		return
	}
	r.census = m.link
}

func (r *receiver) scheduleBalance(ctx actor.Context) {
	r.balTimer = r.env.After(balanceEvery, ctx.Self(), &balanceTick{who: r})
}

func (r *receiver) stopBalance() {
	if r.balTimer != nil {
		r.balTimer.Stop()
		r.balTimer = nil
	}
}

// onBalanceTick reads the consumer count off the actor.
func (r *receiver) onBalanceTick(ctx actor.Context, m *balanceTick) {
	if m.who != r || r.stopping {
		return
	}
	r.balTimer = nil
	if r.link != nil && r.census == nil {
		r.attachCensus(ctx)
	}
	cc, ok := r.census.(transport.ConsumerCounter)
	if r.link == nil || r.census == nil || r.st == stHandingOver {
		r.scheduleBalance(ctx)
		return
	}
	if !ok {
		r.env.Log.Debug("amqpactor: partitions not balanced: the transport cannot count consumers", "address", r.spec.Address.String())
		return
	}
	self, env := ctx.Self(), r.env
	env.Go(func() {
		cctx, cancel := env.CloseCtx(context.Background())
		defer cancel()
		n, err := cc.Consumers(cctx)
		env.Root.Send(self, &consumersRead{who: r, n: n, err: err})
	})
}

func (r *receiver) onConsumersRead(ctx actor.Context, m *consumersRead) {
	if m.who != r || r.stopping {
		return
	}
	if m.err != nil {
		if errors.Is(m.err, transport.ErrNotSupported) {
			// This transport cannot count the broker's consumers: no
			// balancing, and no census link kept for it.
			r.env.Log.Info("amqpactor: partitions not balanced: this broker's consumers cannot be counted", "address", r.spec.Address.String(), "error", m.err)
			r.closeCensus()
			return
		}
		// Once at Warn: balancing stops while it fails, which must not be
		// silent, but a read fails every second for as long as it lasts.
		log := r.env.Log.Debug
		if !r.countFailing {
			log = r.env.Log.Warn
		}
		r.countFailing = true
		log("amqpactor: partitions not balanced: reading the census queue's consumers failed", "address", r.spec.Address.String(),
			"census", r.spec.Balance.Census.String(), "error", m.err)
	} else {
		if r.countFailing {
			r.env.Log.Info("amqpactor: partitions balanced again: the census queue's consumers are read", "address", r.spec.Address.String())
			r.countFailing = false
		}
		r.rebalance(ctx, m.n)
	}
	r.scheduleBalance(ctx)
}

// rebalance asks for a hand-over of every partition this replica holds
// beyond its share of k replicas. While one is in progress it waits, so
// that what is held is counted once the hand-overs have landed.
func (r *receiver) rebalance(ctx actor.Context, k int) {
	parts := r.spec.Balance.Parts()
	if k < 1 || len(parts) == 0 {
		return
	}
	share := (len(parts) + k - 1) / k
	now := time.Now()
	var held []int
	for i, p := range parts {
		if !p.Handing.IsZero() && now.Sub(p.Handing) < handingFor {
			return
		}
		if p.PID != nil && p.Held != nil && p.Held() {
			held = append(held, i)
		}
	}
	surplus := held[min(share, len(held)):]
	ok, pause := r.spec.Balance.MayHandOver(now, k, held, len(surplus))
	if pause != nil {
		why := "a partition handed over came straight back, so the census queue counts consumers that are no replicas"
		if pause.Part < 0 {
			why = "more hand-overs in a minute than twice the partitions; the census queue may count consumers that are no replicas"
		}
		r.env.Log.Warn("amqpactor: partitions no longer handed over: "+why+" (is another client consuming from it?)",
			"address", r.spec.Address.String(), "census", r.spec.Balance.Census.String(), "consumers", pause.Census,
			"partition", pause.Part, "held", len(held), "for", pause.For)
	}
	if !ok {
		return
	}
	// The last ones first: partition 0's receiver is the one that polls.
	for _, i := range surplus {
		r.spec.Balance.HandOver(i, now, k)
		ctx.Send(parts[i].PID, &protocol.Handover{})
	}
}

// onHandover stops taking deliveries; once every delivery the link took is
// settled (linkIdle), finishHandover detaches it and attaches anew.
func (r *receiver) onHandover() {
	if r.link == nil || r.st == stHandingOver || r.drain != nil || r.stopping {
		if b := r.spec.Balance; b != nil && r.st != stHandingOver {
			// Not handing over after all: the next poll need not wait.
			b.Handing(r.spec.Partition, time.Time{})
		}
		return
	}
	if !r.set(evHandover, nil) {
		return
	}
	r.dl.StopPump()
}

// finishHandover closes the link after its last settle (what the pump had
// not taken goes back to the broker with it) and attaches again once it is
// closed: the broker has by then made the next replica in line active.
func (r *receiver) finishHandover(ctx actor.Context) {
	link, dl := r.link, r.dl
	if b := r.spec.Balance; b != nil {
		b.HandedOver(r.spec.Partition, time.Now())
	}
	r.leaveBalance()
	r.link, r.dl = nil, nil
	closed := make(chan struct{})
	r.kept.closed = closed
	if !dl.Close(context.Background(), func(error) {
		dl.Cancel()
		close(closed)
	}) {
		dl.Cancel()
		r.closeLink(link, context.Background(), nil)
	}
	r.set(evDetached, nil)
	r.attach(ctx, 1)
}
