package deliver

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/amqpactor/amqpactor/internal/budget"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/workq"
	"github.com/amqpactor/amqpactor/transport"
)

// Owner is the receiver actor's side of a Link: the Settler its
// deliveries carry (Delivery.To), and what its goroutines hand on or
// report. No method may block.
type Owner interface {
	protocol.Settler
	// Batch returns an empty batch for the pump to fill, and Dispatch hands
	// the filled one to the handlers; the pump alone calls both.
	Batch() []*protocol.Delivery
	Dispatch(ds []*protocol.Delivery)
	// Idle: the pump has stopped and its last delivery is settled (what a
	// drain or a hand-over waits for). Called once, by whichever goroutine
	// settled last.
	Idle()
	// Ended: the link failed under the pump or the settler.
	Ended(err error)
}

// Holders is the App's set of links that hold deliveries, where a
// transaction finds one (Find).
type Holders interface {
	Add(h any)
	Remove(h any)
	Range(f func(h any) bool)
}

// Counters are a receiver's across its links, so that a late verdict of an
// ended link still counts where the tree reads. Every goroutine updates
// them atomically.
type Counters struct {
	Delivered, Dropped, Poison atomic.Uint64
	ByOutcome                  [5]atomic.Uint64
	// BrokerSettled counts deliveries the broker settled itself while a
	// handler held them (transport.ReceiverOptions.OnBrokerSettled).
	BrokerSettled atomic.Uint64
}

// Config is what a Link is made with.
type Config struct {
	Link transport.Receiver
	// Gen names the link in each Delivery.Link.
	Gen uint64
	// Base is the parent of the handlers' context.
	Base context.Context
	// Address names the link in logs.
	Address string
	// Settled: the link receives pre-settled deliveries, which are neither
	// held nor settled.
	Settled bool
	// Credit is the link's window.
	Credit uint32
	// Paused: the receiver holds back credit until Resume.
	Paused   bool
	Budget   *budget.Budget // the App's byte budget; nil without one
	Holders  Holders
	Counters *Counters
	Log      *slog.Logger
	// Go runs the pump and the settler, so that the App waits for them.
	Go func(func())
	// CloseCtx bounds a disposition or a close (actors.Env.CloseCtx).
	CloseCtx func(context.Context) (context.Context, context.CancelFunc)
}

// Link is one link's deliveries not settled yet and the path their
// verdicts take (not AMQP flow control: that is the settler's credit).
type Link struct {
	// Set by New (owner by Start, before the goroutines it starts) and
	// never written after: every goroutine reads them.
	cfg      Config
	owner    Owner
	ctx      context.Context // the handlers': ends with the link (Cancel, End)
	cancel   context.CancelFunc
	pumpCtx  context.Context // the pump's: ends first when draining (StopPump)
	stopPump context.CancelFunc
	// q carries settles, pauses and the close to the settler, which alone
	// takes from it; the actor and the pump push. The queue closes when
	// the link ends, which is what drops a late settle.
	q *workq.Q[settleItem]
	// budget is the link's account in the App's byte budget (nil without
	// one): the pump counts arrivals, the settler settles and grants (and
	// Start the attach's first grant, before the settler runs).
	budget *budget.Link

	// open counts the deliveries not settled yet, plus one while the pump
	// runs: it reaches zero once, when a stopped pump's last delivery is
	// settled, and then tells the Owner (Idle). unsettled is the same
	// without the pump, for Describe. The pump adds, the actor subtracts.
	open, unsettled atomic.Int64

	// Under mu, from the pump (hold), the actor (Settle, Cut) and
	// transactions (Find, Claim): held is every delivery not settled yet,
	// a ring through the Deliveries with held as its head (tracked, set by
	// New, is false for a link that receives settled deliveries). It is
	// for a drain whose graceful part runs out to send back as released (a
	// handler may never return), and for a transaction to find and claim.
	// Once cut, settles are refused, so a delivery is either settled by its
	// handler or released.
	mu      sync.Mutex
	tracked bool
	held    protocol.Delivery
	cut     bool
}

// New makes the data plane of the link cfg.Link; Start sets it going.
func New(cfg Config) *Link {
	base := cfg.Base
	if base == nil {
		base = context.Background()
	}
	l := &Link{cfg: cfg, q: workq.New[settleItem](), budget: cfg.Budget.Link()}
	l.ctx, l.cancel = context.WithCancel(base)
	l.pumpCtx, l.stopPump = context.WithCancel(l.ctx)
	if !cfg.Settled {
		l.tracked = true
		l.held.HeldPrev, l.held.HeldNext = &l.held, &l.held
	}
	return l
}

// Start grants the link its first credit and starts the pump and the
// settler, which report to o. A paused receiver owes the new link its
// window: the settler grants it on Resume. Under a budget the first grant
// is one credit, and the settler grants the rest once the first delivery
// has told its size.
func (l *Link) Start(o Owner) {
	l.owner = o
	if l.tracked {
		l.cfg.Holders.Add(l)
	}
	l.open.Store(1) // the pump's
	owed, attachOwed := l.cfg.Credit, uint32(0)
	if !l.cfg.Paused {
		k := l.budget.Grant(l.cfg.Credit)
		owed -= k
		attachOwed = owed
		if err := l.cfg.Link.IssueCredit(k); err != nil {
			o.Ended(err)
		}
	}
	// After the first grant: the settler's grants and this one share the
	// link's budget account, which is one goroutine's to grant from.
	l.cfg.Go(l.pump)
	l.cfg.Go(func() { l.settler(owed, attachOwed, l.cfg.Paused) })
}

// StopPump stops taking deliveries (a drain, a hand-over): Idle follows
// once what the pump took is settled.
func (l *Link) StopPump() { l.stopPump() }

// Pause holds back credit from now on; the settler hears it in order with
// the settles.
func (l *Link) Pause() { l.q.Push(settleItem{pause: true}) }

// Resume grants the credit held back while paused.
func (l *Link) Resume() { l.q.Push(settleItem{resume: true, unpause: true}) }

// Close ends the link after every earlier settle: the settler closes it by
// ctx and reports to done. It reports false when the link has ended
// already.
func (l *Link) Close(ctx context.Context, done func(error)) bool {
	return l.q.PushClose(settleItem{close: true, ctx: ctx, done: done})
}

// Done is closed when the handlers' context ends.
func (l *Link) Done() <-chan struct{} { return l.ctx.Done() }

// Cancel ends the handlers' context: they stop work nobody can settle.
func (l *Link) Cancel() { l.cancel() }

// End forgets the link at once: the handlers' context ends and later
// settles are dropped; the caller closes the link, which gives what is
// unsettled back to the broker.
func (l *Link) End() {
	l.cancel()
	l.q.Close()
}

// Unsettled is how many deliveries the handlers hold.
func (l *Link) Unsettled() uint64 { return uint64(max(l.unsettled.Load(), 0)) }

// Bytes is what the link counts in the App's budget, held and reserved;
// false without a budget.
func (l *Link) Bytes() (int64, bool) {
	if l.budget == nil {
		return 0, false
	}
	return l.budget.Bytes(), true
}
