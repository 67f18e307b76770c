// Package receiver owns one receiver link: it attaches it, grants credit by
// the runtime's rule, turns transfers into protocol.Delivery, hands them to
// the subscription's dispatcher actor and sends the dispositions that come
// back.
//
// Three goroutines serve the actor and report to it by message: the attach
// call, the pump (blocked in the link's Receive) and the settler (which sends
// dispositions and owns the credit count, so credit is granted only for
// deliveries whose disposition is on the wire, and only what the App's byte
// budget, package budget, has room for). The pump sends the dispatcher
// actor a *dispatcher.Deliveries with every transfer it has at hand (what
// the link had prefetched, transport.Prefetcher); the partitions' workers
// send the outcomes back to this actor as *Dispositions, which it queues
// for the settler through the link's inflight (its deliveries not settled
// yet). The actor owns the link's life (attach, end, drain, pause) and opens
// a new inflight per link, so a late disposition for an ended link is
// dropped.
//
// A poison delivery (transport.Poison: the transport found it unsafe to
// decode, or over the max message size) never reaches a partition: the pump
// queues it for the settler as rejected with amqp:decode-error and the
// reason, counts it (counter "poison") and logs it at warn; the link goes on.
//
// The link's life is one linkState (state.go), which only linkState.on
// moves: attaching, attached, standby, degraded (attached after links the
// broker detached soon after they attached; flapping.go), handing-over,
// detached, backoff (shown as restarting) while it waits to attach again,
// restarting, failed, stopped. Its String is the node state the tree and
// the StateChanges show.
package receiver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/dispatcher"
	"github.com/amqpactor/amqpactor/internal/budget"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/workq"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// Attached is sent to the parent after a successful attach, after a failed
// first attach (which decides Start), and when the receiver gives up
// (Failed: a terminal refusal came back actors.TerminalRetries times).
type Attached struct {
	Err    error
	Failed bool
}

// SessionLost tells the parent that the session ended under the link: a new
// link on it would fail too, so the parent opens a new session and replaces
// this receiver.
type SessionLost struct{ Err error }

func sessionEnded(err error) bool {
	var se *amqp.SessionError
	return errors.As(err, &se)
}

// Dispositions carries outcomes back from a partition to the receiver
// actor: Items are deliveries of one link, each with its Outcome, in the
// order they were decided. From names the partition, in the message rather
// than as its sender, since a sender costs an envelope per message.
type Dispositions struct {
	Items []*protocol.Delivery
	From  *actor.PID
	in    *inflight
}

// dispositions recycles Dispositions, which the actor puts back once it has
// queued their outcomes: one message per batch of outcomes otherwise
// allocated twice.
var dispositions = sync.Pool{New: func() any { return &Dispositions{Items: make([]*protocol.Delivery, 0, 16)} }}

// pumpBatch bounds the deliveries one message to the dispatcher carries.
const pumpBatch = 256

// New returns the props of a receiver for spec on sess; deliveries go to
// the dispatcher actor to, as *dispatcher.Deliveries. A receiver made paused grants no credit until Resume. A
// replacement (after a lost session or connection) retries a failed first
// attach; the first receiver of a subscription reports it instead, since it
// decides Subscribe and Start.
func New(env *actors.Env, sess transport.Session, spec *protocol.SubscriptionSpec, to *actor.PID, paused, replacement bool) *actor.Props {
	k := &kept{paused: paused}
	return env.Props(func() actor.Actor {
		// Every incarnation starts from here: what they share is in k.
		r := &receiver{env: env, sess: sess, spec: spec, to: to, kept: k, counters: &k.counters,
			replacement: replacement || k.panics.Load() > 0 || k.detached != nil, stopping: k.drained,
			paused: k.paused, sh: &shared{env: env, spec: spec, to: to, counters: &k.counters}}
		if d := k.detached; d != nil {
			r.restarts, r.attempt, r.lastErr, r.st = d.restarts, d.attempt, d.err, d.state
			r.flaps, r.degraded = d.flaps, d.degraded
		}
		return r
	})
}

// kept is what one receiver's incarnations share; only the actor's mailbox
// run writes paused and drained (on Restarting, before the producer runs).
type kept struct {
	paused, drained bool
	panics          atomic.Uint64
	// detached is set by an incarnation that failed because its link
	// ended, for the next one to re-attach after a backoff.
	detached *detachedLink
	counters counters
	// closed is closed once the last link given to closeLink is closed:
	// the next attach waits for it, so that what the old link held is
	// back on the broker before a new link can take newer messages.
	closed chan struct{}
}

// detachedLink is what an incarnation whose link ended hands the next.
type detachedLink struct {
	err               error
	restarts, attempt int
	state             linkState
	flaps             int
	degraded          bool
}

// StateStandby is the state of a receiver whose broker holds another
// consumer active on its single-active-consumer queue (RabbitMQ 4.3).
const StateStandby = "standby"

// StateDegraded is the state of a receiver attached again after links that
// the broker detached soon after they attached, until the link has stayed
// attached for the settled period (actors.Env.Settled). It is not ready:
// the broker may take this link too.
const StateDegraded = "degraded"

// shared is what the receiver's goroutines (the pump, the settler) and the
// partitions' workers (through the inflight) use of it: set when the
// incarnation is made and never written after, but for the counters, which
// they update atomically. Nothing else of the receiver is theirs to read.
type shared struct {
	env  *actors.Env
	spec *protocol.SubscriptionSpec
	to   *actor.PID // the dispatcher
	*counters
}

// linkActive names one attach, so that what the broker says of a link's
// activity is taken for that link only.
type linkActive struct {
	// said is what the broker said last: 0 nothing yet, 1 active, 2
	// standby. Kept here too, since it may say so before the attach's
	// answer reaches the actor.
	said atomic.Int32
}

type (
	attachResult struct {
		attempt int
		link    transport.Receiver
		err     error
		active  *linkActive // what the broker says of the link's activity
	}
	// activeChanged: the broker said whether link is the active consumer.
	activeChanged struct {
		link   *linkActive
		active bool
	}
	linkEnded struct {
		link uint64
		err  error
	}
	reattach struct{ attempt int }
	// settledLink: the link of gen may have stayed attached for the
	// settled period.
	settledLink struct{ gen uint64 }
	// afterFailure follows a failure for its link in the mailbox: a
	// strategy that resumed the actor, rather than restarting it, leaves
	// d for it to re-attach.
	afterFailure struct{ d *detachedLink }
	// inflightIdle: the link's pump has stopped and its last delivery is
	// settled (what a drain waits for).
	inflightIdle struct{ link uint64 }
	// graceOver: the graceful part of a drain ended before the link's
	// handlers settled everything.
	graceOver  struct{ link uint64 }
	settleItem struct {
		raw     *amqp.Message
		outcome messages.Outcome
		// resume grants the credit held back while paused, or held back
		// until the link's first delivery told the budget its size;
		// unpause (with resume) and pause tell the settler the receiver's
		// Pause and Resume.
		resume, unpause, pause bool
		// txn: a transaction has settled the delivery already (Claim); the
		// settler only counts its credit.
		txn bool
		// close ends the link after every earlier settle and reports to done;
		// release lists deliveries to settle released first.
		close   bool
		release []*amqp.Message
		ctx     context.Context
		done    func(err error)
	}
)

// receiver is the actor; every field is its mailbox run's, read and
// written by Receive alone. Its goroutines get sh and what they are
// started with.
type receiver struct {
	env  *actors.Env
	sess transport.Session
	spec *protocol.SubscriptionSpec
	to   *actor.PID // the dispatcher
	sh   *shared

	link       transport.Receiver
	gen        uint64
	linkCtx    context.Context // handlers' context: ends with the link
	cancelLink context.CancelFunc
	pumpCtx    context.Context // the pump's: ends first when draining
	stopPump   context.CancelFunc
	settleQ    *workq.Q[settleItem]
	inflight   *inflight

	st          linkState
	lastErr     error
	restarts    int
	attempt     int
	terminal    int // terminal refusals in a row
	replacement bool
	stopping    bool
	drain       *protocol.Drain
	alsoDone    []chan<- error // drains that came while drain was in progress
	paused      bool           // the settler hears of each change (settleItem.pause, unpause)
	timer       *time.Timer
	// attachedAt is when the current link attached; flaps counts the links
	// in a row that ended before the settled period (actors.Env.Settled),
	// which lengthens the backoff; degraded: the strategy said the flaps
	// spent the restart budget (actors.LinkDegraded). settleTimer ends
	// the settled period of a degraded link.
	attachedAt  time.Time
	flaps       int
	degraded    bool
	settleTimer *time.Timer
	// active names the current link's attach; activeKnown and isActive
	// are what the broker last said of it (a single-active-consumer queue).
	active                *linkActive
	activeKnown, isActive bool
	kept                  *kept
	// Balancing partitions across replicas (balance.go): self is the PID
	// the Balance knows, balTimer the next poll of partition 0's receiver.
	self     *actor.PID
	balTimer *time.Timer
	// attachDelivered is the delivered count when the link attached.
	attachDelivered uint64
	// census is partition 0's link to the census queue (balance.go).
	census transport.Receiver
	// censusGen is the link generation whose census attach was asked
	// for: one attach per link, even when it is refused.
	censusGen uint64
	// countFailing: the last read of the census queue's consumers failed
	// (warned once; balancing waits until a read works again).
	countFailing bool

	*counters // the kept ones: a restart keeps counting
}

// counters are a receiver's, across its incarnations: a late disposition of
// a dead incarnation's link still counts where the tree reads.
type counters struct {
	delivered, dropped, poison atomic.Uint64
	byOutcome                  [5]atomic.Uint64
}

func (r *receiver) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		switch {
		case r.stopping:
		case r.kept.detached != nil:
			// Restarted because the link ended: re-attach after a backoff.
			r.kept.detached = nil
			r.scheduleReattach(ctx)
		default:
			r.attach(ctx, 1)
		}
	case *Dispositions:
		m.in.settle(m.Items)
		clear(m.Items)
		m.Items, m.From, m.in = m.Items[:0], nil, nil
		dispositions.Put(m)
	case *attachResult:
		r.onAttach(ctx, m)
	case *inflightIdle:
		if m.link == r.gen && r.link != nil && r.drain != nil {
			r.finishDrainedLink()
		} else if m.link == r.gen && r.link != nil && r.st == stHandingOver {
			r.finishHandover(ctx)
		}
	case *protocol.Handover:
		r.onHandover()
	case *balanceTick:
		r.onBalanceTick(ctx, m)
	case *consumersRead:
		r.onConsumersRead(ctx, m)
	case *censusAttached:
		r.onCensusAttached(m)
	case *graceOver:
		if m.link == r.gen && r.link != nil && r.drain != nil {
			r.cutDrainedLink()
		}
	case *linkEnded:
		r.onLinkEnded(ctx, m)
	case *activeChanged:
		if m.link == r.active && r.link != nil {
			r.showActive(m.link.said.Load())
		}
	case *settledLink:
		r.onSettled(m)
	case *afterFailure:
		if r.kept.detached == m.d {
			// Resumed, not restarted: no next incarnation will take d.
			r.kept.detached = nil
			if !r.stopping {
				r.scheduleReattach(ctx)
			}
		}
	case *actors.LinkDegraded:
		r.onDegraded(ctx, m)
	case *reattach:
		// Only the backoff the timer was for: a stale timer (a late
		// answer scheduled another) must not start a second attach.
		if !r.stopping && r.link == nil && r.st == stBackoff {
			r.attach(ctx, m.attempt)
		}
	case *protocol.Pause:
		r.pause()
	case *protocol.Resume:
		if r.paused {
			r.paused = false
			if r.settleQ != nil {
				r.settleQ.Push(settleItem{resume: true, unpause: true})
			}
		}
	case *protocol.Drain:
		r.onDrain(ctx, m)
	case *protocol.Describe:
		ctx.Respond(r.describe(ctx))
	case *actors.Crash:
		panic(fmt.Sprintf("amqpactor: receiver %s: %s", r.spec.Address, m.Reason))
	case *actor.Restarting:
		if r.kept.detached == nil {
			r.kept.panics.Add(1)
		}
		r.kept.paused = r.paused
		r.kept.drained = r.stopping
		if r.timer != nil {
			r.timer.Stop()
		}
		r.stopSettleTimer()
		r.stopBalance()
		r.endLink(context.Background(), nil)
		r.finishDrain(protocol.ErrStopped)
		r.set(evRestart, nil)
	case *actor.Stopped:
		r.set(evStop, nil)
	case *actor.Stopping:
		r.stopping = true
		if r.timer != nil {
			r.timer.Stop()
		}
		r.stopSettleTimer()
		r.stopBalance()
		r.endLink(context.Background(), nil)
		r.finishDrain(protocol.ErrStopped)
	}
}

// set moves the receiver's state on ev (linkState.on) and reports a change
// of its public name (see actors.Env.SetState). An illegal transition is a
// bug of this file: it is logged at Error and the state kept, since a panic
// would restart the receiver (and its link) for bookkeeping.
func (r *receiver) set(ev linkEvent, err error) bool {
	to, ok := r.st.on(ev)
	if !ok {
		r.env.Log.Error("amqpactor: receiver: illegal state transition", "address", r.spec.Address.String(),
			"state", r.st.String(), "event", ev.String())
		return false
	}
	from := r.st.String()
	r.st = to
	n := actors.SpecNode(r.spec).Child("receiver", "receiver", r.spec.Address.String())
	r.env.SetState(&from, n, to.String(), err)
	return true
}

func (r *receiver) opts(self *actor.PID, la *linkActive) transport.ReceiverOptions {
	node := r.spec.Node
	if node == "" {
		node = r.spec.Name
	}
	o := transport.ReceiverOptions{
		Address:      r.spec.Address,
		Subscription: node,
		Ephemeral:    r.spec.Ephemeral,
		Settled:      r.spec.Settled,
		Credit:       r.spec.Credit,
		ClassicQueue: r.spec.Classic,

		QueueArguments: r.spec.QueueArguments,
		DeadLetter:     r.spec.DeadLetter,
		DeliveryLimit:  r.spec.DeliveryLimit,
	}
	if r.spec.Address.SingleActiveConsumer() {
		// A partition queue: the broker may say whether this replica is
		// its active consumer (RabbitMQ 4.3).
		root := r.env.Root
		o.OnActive = func(active bool) {
			if active {
				la.said.Store(1)
			} else {
				la.said.Store(2)
			}
			root.Send(self, &activeChanged{link: la, active: active})
		}
	}
	return o
}

func (r *receiver) attach(ctx actor.Context, attempt int) {
	if !r.set(evAttach, nil) {
		return
	}
	la := &linkActive{}
	self, sess, opts, env, prev := ctx.Self(), r.sess, r.opts(ctx.Self(), la), r.env, r.kept.closed
	var caller context.Context
	if r.gen == 0 && !r.replacement {
		// The first attach: Start's or Subscribe's context bounds it too.
		caller = r.spec.AttachCtx
	}
	env.Go(func() {
		actx, cancel := env.AttachCtx(caller)
		defer cancel()
		if prev != nil {
			select {
			case <-prev:
			case <-actx.Done():
			}
		}
		link, err := sess.NewReceiver(actx, opts)
		env.Root.Send(self, &attachResult{attempt: attempt, link: link, err: err, active: la})
	})
}

func (r *receiver) onAttach(ctx actor.Context, m *attachResult) {
	if m.err != nil {
		if r.link == nil {
			r.set(evAttachFailed, m.err)
		}
		r.lastErr = m.err
		r.env.Log.Warn("amqpactor: attach failed", "address", r.spec.Address.String(), "error", m.err)
		if r.link != nil {
			return // an attach of a dead incarnation; this one has a link
		}
		if (r.gen == 0 && !r.replacement) || r.stopping {
			// The first attach decides Start: its error goes to the
			// caller, who gives up on this subscription.
			ctx.Send(ctx.Parent(), &Attached{Err: m.err})
			return
		}
		if sessionEnded(m.err) {
			// The parent counts terminal refusals across sessions.
			r.set(evBackoff, m.err)
			ctx.Send(ctx.Parent(), &SessionLost{Err: m.err})
			return
		}
		if actors.Terminal(m.err) {
			r.terminal++
			if r.terminal > actors.TerminalRetries {
				r.set(evFail, m.err)
				r.env.Log.Error("amqpactor: receiver gave up re-attaching", "address", r.spec.Address.String(),
					"attempts", r.terminal, "error", m.err)
				ctx.Send(ctx.Parent(), &Attached{Err: m.err, Failed: true})
				return
			}
			r.scheduleReattachAfter(ctx, r.env.Backoff.Delay(1<<20))
			return
		}
		if r.attempt >= actors.EscalateAfter {
			// Re-attaching on this session keeps failing: escalate, the
			// parent replaces the session and this receiver.
			r.env.Log.Warn("amqpactor: re-attach keeps failing; replacing the session", "address", r.spec.Address.String(),
				"attempts", r.attempt, "error", m.err)
			r.set(evBackoff, m.err)
			ctx.Send(ctx.Parent(), &SessionLost{Err: m.err})
			return
		}
		r.scheduleReattach(ctx)
		return
	}
	if r.stopping || r.link != nil {
		// Stopping, or a link already attached (an attach of a dead
		// incarnation answered this one): never two pumps.
		r.closeLink(m.link, context.Background(), nil)
		if r.link == nil && r.st == stAttaching {
			r.set(evDetached, nil) // drained while it attached
		}
		return
	}
	ev := evAttached
	if r.flaps >= shakyAfter {
		// The last links ended soon after they attached: this one is not
		// trusted (nor ready) until it has stayed attached a while.
		ev = evShaky
	}
	if !r.set(ev, r.shakyErr()) {
		r.closeLink(m.link, context.Background(), nil)
		return
	}
	r.link = m.link
	r.attachedAt = time.Now()
	r.active, r.activeKnown, r.isActive = m.active, false, false
	r.gen = r.env.Gen()
	r.attempt, r.terminal = 0, 0
	if ev == evShaky {
		r.stopSettleTimer()
		r.settleTimer = r.env.After(r.env.Settled(), ctx.Self(), &settledLink{gen: r.gen})
	}
	if m.active != nil {
		r.showActive(m.active.said.Load())
	}
	r.joinBalance(ctx, m.active)
	base := r.env.Base
	if base == nil {
		base = context.Background()
	}
	r.linkCtx, r.cancelLink = context.WithCancel(base)
	r.pumpCtx, r.stopPump = context.WithCancel(r.linkCtx)
	r.settleQ = workq.New[settleItem]()
	self := ctx.Self()
	link, gen, pumpCtx, q := r.link, r.gen, r.pumpCtx, r.settleQ
	in := &inflight{r: r.sh, self: self, gen: gen, ctx: r.linkCtx, q: q, link: link}
	if !r.spec.Settled {
		in.tracked = true
		in.held.HeldPrev, in.held.HeldNext = &in.held, &in.held
		register(in)
	}
	in.open.Store(1) // the pump's
	in.budget = r.env.Budget.Link()
	r.inflight = in
	// A paused receiver owes the new link its window: the settler grants
	// it on Resume. Under a budget the first grant is one credit, and the
	// settler grants the rest once the first delivery has told its size.
	owed, attachOwed := r.spec.Credit, uint32(0)
	paused, sh := r.paused, r.sh
	if !paused {
		k := in.budget.Grant(r.spec.Credit)
		owed -= k
		attachOwed = owed
		if err := link.IssueCredit(k); err != nil {
			r.env.Root.Send(self, &linkEnded{link: gen, err: err})
		}
	}
	// After the first grant: the settler's grants and this one share the
	// link's budget account, which is one goroutine's to grant from.
	r.env.Go(func() { sh.pump(in, link, pumpCtx) })
	r.env.Go(func() { sh.settler(self, in, link, gen, q, owed, attachOwed, paused) })
	ctx.Send(ctx.Parent(), &Attached{})
}

// inflight is one link's deliveries not settled yet and the path their
// dispositions take (not AMQP flow control: that is the settler's credit),
// used by its pump, the partition workers and the settler without the
// actor: a delivery and its disposition through the actor's mailbox were two
// hand-overs per message, for state (what is unsettled) that the link's own
// settle queue keeps as well. The
// queue is closed when the link ends, which is what drops a late settle: it
// would settle someone else's delivery on a new link.
type inflight struct {
	r    *shared // the receiver's, for its goroutines
	self *actor.PID
	gen  uint64
	ctx  context.Context // the handlers': ends with the link
	q    *workq.Q[settleItem]
	// open counts the deliveries not settled yet, plus one while the pump
	// runs: it reaches zero once, when a stopped pump's last delivery is
	// settled, and then tells the actor. unsettled is the same without
	// the pump, for Describe.
	open, unsettled atomic.Int64

	// link is what the deliveries came on, for a transaction that settles
	// one of them (Find).
	link transport.Receiver
	// budget is the link's account in the App's byte budget (nil without
	// one): the pump counts arrivals, the settler settles and grants.
	budget *budget.Link

	// held is every delivery not settled yet, a ring through the
	// Deliveries with held as its head (tracked is false for a link that
	// receives settled deliveries): for a drain whose graceful part runs
	// out to send back as released (a handler may never return), and for a
	// transaction to find and claim. Once cut, settles are refused, so a
	// delivery is either settled by its handler or released.
	mu      sync.Mutex
	tracked bool
	held    protocol.Delivery
	cut     bool
}

// hold notes a delivery handed to the handlers.
func (in *inflight) hold(d *protocol.Delivery) {
	if !in.tracked {
		return
	}
	in.mu.Lock()
	if !in.cut {
		last := in.held.HeldPrev
		d.HeldPrev, d.HeldNext, d.HeldIn = last, &in.held, in
		last.HeldNext = d
		in.held.HeldPrev = d
	}
	in.mu.Unlock()
}

// unlinkLocked takes d out of the ring. in.mu is held.
func (in *inflight) unlinkLocked(d *protocol.Delivery) {
	d.HeldPrev.HeldNext = d.HeldNext
	d.HeldNext.HeldPrev = d.HeldPrev
	d.HeldPrev, d.HeldNext, d.HeldIn = nil, nil, nil
}

// push queues a settle for the settler, unless the inflight was cut (or its
// link ended). A delivery a transaction claimed goes to the settler only
// for its credit.
func (in *inflight) push(d *protocol.Delivery, it settleItem) bool {
	if !in.tracked {
		return in.q.Push(it)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cut {
		return false
	}
	linked := d.HeldIn == in
	it.txn = linked && d.Claimed
	if linked {
		// Out of the ring whatever happens: d goes back to its pool.
		in.unlinkLocked(d)
	}
	return in.q.Push(it)
}

// cutAndClose refuses further settles and queues, last, the release of
// every delivery still held and the link's close. A delivery a
// transaction claimed is the transaction's to settle.
func (in *inflight) cutAndClose(it settleItem) {
	in.mu.Lock()
	in.cut = true
	if in.tracked {
		for d := in.held.HeldNext; d != &in.held; {
			next := d.HeldNext
			if !d.Claimed {
				it.release = append(it.release, d.Raw)
			}
			in.unlinkLocked(d)
			d = next
		}
	}
	in.q.PushClose(it)
	in.mu.Unlock()
}

// Settle sends ds's outcomes to the receiver actor; see protocol.Settler.
func (in *inflight) Settle(ds []*protocol.Delivery, from *actor.PID) {
	m := dispositions.Get().(*Dispositions)
	m.Items, m.From, m.in = append(m.Items, ds...), from, in
	in.r.env.Root.Send(in.self, m)
}

// settle queues the outcomes of ds for the settler, in order; the actor
// calls it for the Dispositions that come back.
func (in *inflight) settle(ds []*protocol.Delivery) {
	for _, d := range ds {
		in.settleOne(d, d.Outcome)
	}
}

func (in *inflight) settleOne(d *protocol.Delivery, o messages.Outcome) {
	ok := in.push(d, settleItem{raw: d.Raw, outcome: o})
	d.Release()
	in.unsettled.Add(-1)
	if ok {
		if int(o.Kind) < len(in.r.byOutcome) {
			in.r.byOutcome[o.Kind].Add(1)
		}
	} else {
		// The link ended: the broker has taken the delivery back.
		in.r.dropped.Add(1)
	}
	in.release()
}

func (in *inflight) release() {
	if in.open.Add(-1) == 0 {
		in.r.env.Root.Send(in.self, &inflightIdle{link: in.gen})
	}
}

// pump blocks in Receive so the actor never does, and sends the dispatcher
// what it receives: with each transfer, what else the link has prefetched
// (up to pumpBatch), in one message.
func (r *shared) pump(in *inflight, link transport.Receiver, ctx context.Context) {
	defer in.release()
	var id uint64
	pf, _ := link.(transport.Prefetcher)
	batch := dispatcher.NewDeliveries()
	// Nothing reads a delivery's transfer once the settler has settled it,
	// so a transport that can reuse its memory may, once the handler's
	// Message has its own Body.
	fromAMQP := protocol.FromAMQP
	if rc, ok := link.(transport.Recycler); ok && !r.spec.Settled {
		rc.RecycleSettled()
		fromAMQP = protocol.FromAMQPOwned
	}
	take := func(raw *amqp.Message) {
		r.delivered.Add(1)
		if in.budget.Arrived(budget.Size(raw)) {
			// The size is known now: the settler may grant the rest.
			in.q.Push(settleItem{resume: true})
		}
		if reason, ok := transport.Poison(raw); ok {
			r.rejectPoison(in, raw, reason)
			return
		}
		id++
		d := protocol.NewDelivery()
		d.ID, d.Link, d.Raw, d.Message, d.Ctx, d.To = id, in.gen, raw, fromAMQP(raw), in.ctx, in
		d.Draining = ctx.Done() // a worker waiting to retry stops at a drain
		in.open.Add(1)
		in.unsettled.Add(1)
		in.hold(d)
		batch.Items = append(batch.Items, d)
	}
	for {
		raw, err := link.Receive(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.env.Root.Send(in.self, &linkEnded{link: in.gen, err: err})
			}
			return
		}
		if ctx.Err() != nil {
			// The link is ending (a restart, a stop): the delivery stays
			// unsettled and its link's close gives it back to the broker.
			return
		}
		take(raw)
		for pf != nil && len(batch.Items) < pumpBatch && ctx.Err() == nil {
			raw := pf.Prefetched()
			if raw == nil {
				break
			}
			take(raw)
		}
		if len(batch.Items) > 0 {
			// What was taken is counted in the inflight: it goes to the
			// dispatcher even when the link is ending now.
			r.env.Root.Send(r.to, batch)
			batch = dispatcher.NewDeliveries()
		}
	}
}

// PoisonCondition is the error condition a poison message is rejected with.
const PoisonCondition = "amqp:decode-error"

// rejectPoison settles a poison message (transport.Poison: its payload was
// not safe to decode, or was over the max message size) without a handler:
// rejected with amqp:decode-error and the reason, so the broker drops or
// dead-letters it alone and the link goes on. A pre-settled one is only
// counted and logged. The payload is never logged.
func (r *shared) rejectPoison(in *inflight, raw *amqp.Message, reason string) {
	r.poison.Add(1)
	if r.spec.Settled {
		r.env.Log.Warn("amqpactor: poison message dropped (pre-settled)", "address", r.spec.Address.String(), "reason", reason)
	} else {
		r.env.Log.Warn("amqpactor: poison message rejected", "address", r.spec.Address.String(), "reason", reason)
	}
	o := messages.Outcome{Kind: messages.Rejected, Condition: PoisonCondition,
		Description: "amqpactor: the message cannot be decoded safely: " + reason}
	// The settler sends the disposition in order and counts the credit.
	if in.q.Push(settleItem{raw: raw, outcome: o}) {
		r.byOutcome[messages.Rejected].Add(1)
	} else {
		r.dropped.Add(1)
	}
}

// settler sends dispositions in order and grants credit: each time half the
// window has been settled it grants that much again, so the broker is never
// more than one window ahead and a held delivery keeps its credit. owed is
// credit not granted yet (the link attached paused, or under a budget). A
// budget may grant less than is owed: the settler then grants at every
// settle, and waits for other links' settles too (the budget's Wake).
// attachOwed is the part of the attach's window that the budget's slow
// start held back: it is granted even while paused, as the attach would
// have granted it.
//
// paused is the receiver's when the link attached; the receiver's Pause and
// Resume come after it through q, in order with the settles.
func (r *shared) settler(self *actor.PID, in *inflight, link transport.Receiver, gen uint64, q *workq.Q[settleItem], owed, attachOwed uint32, paused bool) {
	defer unregister(in)
	bl := in.budget
	// Everything the link held or reserved goes back when it ends: settles
	// that come after its queue closed are dropped, not counted.
	defer bl.Close()
	window := r.spec.Credit
	threshold := max(window/2, 1)
	settled := owed
	short := false // the budget granted less than was owed
	grant := func() error {
		want := settled
		if paused {
			want = min(settled, attachOwed)
		}
		if want == 0 || (want < threshold && !short) {
			return nil
		}
		k := bl.Grant(want)
		if k < want {
			// Ask to be woken before asking again, so that a settle in
			// between is not missed.
			bl.Await()
			k += bl.Grant(want - k)
		}
		short = k < want
		if k == 0 {
			return nil
		}
		if err := link.IssueCredit(k); err != nil {
			return err
		}
		settled -= k
		attachOwed -= min(k, attachOwed)
		return nil
	}
	// One bound for the dispositions of many batches, renewed once half of
	// it has gone: a context per message was a tenth of the CPU, and one
	// per batch still an allocation every few messages.
	var sctx context.Context
	var renew time.Time
	cancel := context.CancelFunc(func() {})
	defer func() { cancel() }()
	for {
		select {
		case <-q.Ready():
		case <-bl.Wake():
			if err := grant(); err != nil {
				r.env.Root.Send(self, &linkEnded{link: gen, err: err})
				return
			}
			continue
		}
		items, closed := q.Take()
		if sctx != nil && time.Now().After(renew) {
			cancel()
			sctx = nil
		}
		for _, it := range items {
			switch {
			case it.close:
				cancel()
				cctx, cancel := r.env.CloseCtx(it.ctx)
				var errs []error
				for _, raw := range it.release {
					// Back to the broker unchanged: delivery-count stays.
					if err := link.Settle(cctx, raw, messages.Outcome{Kind: messages.Released}); err != nil {
						errs = append(errs, err)
						break
					}
					r.byOutcome[messages.Released].Add(1)
				}
				errs = append(errs, link.Close(cctx))
				cancel()
				it.done(errors.Join(errs...))
				return
			case it.pause:
				paused = true
				continue
			case it.resume:
				if it.unpause {
					paused = false
				}
			default:
				// Before the disposition: a transport that recycles a
				// settled transfer may reuse its data at once.
				size := budget.Size(it.raw)
				if !r.spec.Settled && !it.txn {
					if sctx == nil {
						sctx, cancel = r.env.CloseCtx(context.Background())
						if dl, ok := sctx.Deadline(); ok {
							now := time.Now()
							renew = now.Add(dl.Sub(now) / 2)
						}
					}
					if err := link.Settle(sctx, it.raw, it.outcome); err != nil {
						r.env.Log.Debug("amqpactor: settle failed", "address", r.spec.Address.String(), "error", err)
					}
				}
				bl.Settled(size)
				settled++
			}
			// At each settle, not once a batch: a grant of everything a
			// batch settled can leave less than half a window owed, which a
			// batch handler waiting for a full window never settles.
			if err := grant(); err != nil {
				r.env.Root.Send(self, &linkEnded{link: gen, err: err})
				return
			}
		}
		if closed {
			return
		}
	}
}

func (r *receiver) onLinkEnded(ctx actor.Context, m *linkEnded) {
	if m.link != r.gen || r.link == nil {
		return
	}
	r.lastErr = m.err
	r.env.Log.Warn("amqpactor: link ended", "address", r.spec.Address.String(), "error", m.err)
	up := time.Since(r.attachedAt)
	r.endLink(context.Background(), m.err)
	if r.stopping || r.drain != nil {
		r.finishDrain(m.err)
		return
	}
	r.restarts++
	if sessionEnded(m.err) {
		r.set(evBackoff, m.err)
		ctx.Send(ctx.Parent(), &SessionLost{Err: m.err})
		return
	}
	// A detached link is a failure of this actor, which its parent's
	// strategy decides (by default: restart, and the next incarnation
	// re-attaches after a backoff; see actors.Supervisor).
	r.set(evBackoff, m.err)
	why := r.linkFailed(m.err, up)
	d := &detachedLink{err: m.err, restarts: r.restarts, attempt: r.attempt, state: r.st,
		flaps: r.flaps, degraded: r.degraded}
	r.kept.detached = d
	// Behind the failure in the mailbox: should the strategy resume this
	// incarnation instead of restarting it, this re-attaches.
	ctx.Send(ctx.Self(), &afterFailure{d: d})
	panic(why)
}

// scheduleReattach is the supervision of a detached link: re-attach with
// backoff on the same session; if the session itself is gone the parent
// replaces us.
func (r *receiver) scheduleReattach(ctx actor.Context) {
	r.scheduleReattachAfter(ctx, r.backoff())
}

func (r *receiver) scheduleReattachAfter(ctx actor.Context, d time.Duration) {
	r.set(evBackoff, r.lastErr)
	r.attempt++
	if r.timer != nil {
		r.timer.Stop() // a backoff this one replaces
	}
	r.timer = r.env.After(d, ctx.Self(), &reattach{attempt: r.attempt})
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
	r.cancelLink()
	q := r.settleQ
	r.settleQ, r.inflight = nil, nil
	q.Close()
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

// onDrain starts a graceful detach: no new deliveries are taken, in-flight
// handlers finish and settle, then the link closes after its last settle.
// Past the drain's deadline the link is closed at once and what handlers
// still hold goes back to the broker.
func (r *receiver) onDrain(ctx actor.Context, m *protocol.Drain) {
	if r.drain != nil {
		// Drained twice (Subscription.Close, then Stop): the second
		// hears what the first does.
		r.alsoDone = append(r.alsoDone, m.Done)
		return
	}
	// A drained receiver never attaches again: an attach in flight
	// closes its link when it comes back.
	r.stopping = true
	r.drain = m
	r.pause()
	// Out of the census before out of line: the other replicas must not
	// count this one while its partitions come to them.
	r.closeCensus()
	if r.link == nil {
		r.finishDrain(nil)
		return
	}
	// The inflight reports idle once the pump has stopped and the handlers
	// settled what it had handed out.
	r.stopPump()
	self, gen, linkCtx, grace := ctx.Self(), r.gen, r.linkCtx, m.Grace()
	r.env.Go(func() {
		select {
		case <-grace.Done():
			r.env.Root.Send(self, &graceOver{link: gen})
		case <-linkCtx.Done():
		}
	})
}

// finishDrainedLink closes a draining link after its last settle.
func (r *receiver) finishDrainedLink() {
	r.leaveBalance()
	q, drain, cancelLink := r.settleQ, r.drain, r.cancelLink
	answer := r.answerer() // forgets r.drain: after the line above
	r.link, r.settleQ, r.inflight = nil, nil, nil
	q.PushClose(settleItem{close: true, ctx: drain.Ctx, done: func(err error) {
		cancelLink()
		answer(err)
	}})
	r.set(evDetached, nil)
}

// cutDrainedLink ends a drain whose graceful part ran out: settles are
// refused from now on, what is still held goes back released, the link
// closes (all by the drain's Ctx), and the handlers' contexts are cancelled.
func (r *receiver) cutDrainedLink() {
	r.leaveBalance()
	f, drain, cancelLink := r.inflight, r.drain, r.cancelLink
	answer := r.answerer() // forgets r.drain: after the line above
	r.link, r.settleQ, r.inflight = nil, nil, nil
	cut := fmt.Errorf("amqpactor: drain of %s: graceful part over: %w", r.spec.Address, context.DeadlineExceeded)
	f.cutAndClose(settleItem{close: true, ctx: drain.Ctx, done: func(err error) {
		cancelLink() // before the answer, whichever goroutine gets there first
		answer(errors.Join(cut, err))
	}})
	// After the cut: a handler that returns now cannot settle any more.
	cancelLink()
	r.lastErr = cut
	r.set(evDetached, cut)
}

// answerer returns what answers the drain in progress and every later
// one that joined it, and forgets them.
func (r *receiver) answerer() func(error) {
	drain, also := r.drain, r.alsoDone
	r.drain, r.alsoDone = nil, nil
	return func(err error) {
		drain.Done <- err
		for _, d := range also {
			d <- err
		}
	}
}

func (r *receiver) finishDrain(err error) {
	if r.drain != nil {
		r.answerer()(err)
	}
}

func (r *receiver) unsettledNow() uint64 {
	if r.inflight == nil {
		return 0
	}
	return uint64(max(r.inflight.unsettled.Load(), 0))
}

// showActive shows what the broker said of the link's activity (see
// linkActive.said): RabbitMQ 4.3 says whether this replica consumes the
// partition queue or stands by.
func (r *receiver) showActive(said int32) {
	switch said {
	case 1:
		r.activeKnown, r.isActive = true, true
		r.set(evActive, nil)
	case 2:
		r.activeKnown, r.isActive = true, false
		r.set(evStandby, nil)
	}
}

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
			"unsettled": r.unsettledNow(),
			"delivered": r.delivered.Load(),
			"accepted":  r.byOutcome[messages.Accepted].Load(),
			"rejected":  r.byOutcome[messages.Rejected].Load(),
			"released":  r.byOutcome[messages.Released].Load(),
			"modified":  r.byOutcome[messages.Modified].Load(),
			"late":      r.dropped.Load(),
			"poison":    r.poison.Load(),
		},
	}
	if r.inflight != nil && r.inflight.budget != nil {
		// Held and reserved: what this link counts in the App's budget.
		n.Counters["inflight_bytes"] = uint64(max(r.inflight.budget.Bytes(), 0))
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
