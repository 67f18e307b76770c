// Package budget bounds the bytes of deliveries an App holds at once, across
// all its receiver links (WithMaxInFlightBytes).
//
// Credit is memory the peer may fill at any time, so outstanding credit is
// counted as reserved bytes: a link's grant of k credits reserves k times its
// estimate of a message's size (the largest delivery it has seen), an arrival
// turns one credit's reservation into the delivery's real size, and a settle
// gives that back. A link grants only what the budget has room for, and no
// more than its fair share (the limit over the number of links), so a link
// whose queue is idle cannot pin the budget with credit nobody uses.
//
// Two rules keep it live: a link whose estimate is unknown (nothing has
// arrived yet) grants one credit (slow start), and a link with nothing held
// and no credit always gets one credit, whatever the budget says. So the
// bytes counted never exceed the limit plus one message per link, for
// messages no larger than the largest one their link has seen before; a
// larger one is counted at its real size on arrival (the link's outstanding
// credit is re-reserved at the new estimate) and the link grants nothing
// more until the budget has room again.
//
// A delivery's size is the total length of its data sections, and at least
// one byte; a body in an amqp-value or amqp-sequence section counts as one.
//
// A nil *Budget and a nil *Link do nothing, so callers need no checks.
package budget

import (
	"sync"
	"sync/atomic"

	"github.com/Azure/go-amqp"
)

// Budget is one App's bound on bytes in flight.
type Budget struct {
	limit int64
	used  atomic.Int64 // held and reserved bytes of every link
	peak  atomic.Int64 // the most used has been
	links atomic.Int64 // open links, for the fair share

	// waiting counts links that wait for room; a settle takes mu only when
	// it is not zero, so an uncontended budget costs a settle one load.
	waiting atomic.Int32
	mu      sync.Mutex
	waiters []*Link
}

// New returns a budget of limit bytes, or nil (no bound) when limit <= 0.
func New(limit int64) *Budget {
	if limit <= 0 {
		return nil
	}
	return &Budget{limit: limit}
}

// Limit is the bound in bytes (0 for a nil budget).
func (b *Budget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// InFlight is the bytes held and reserved now, over every link.
func (b *Budget) InFlight() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// Peak is the most InFlight has been.
func (b *Budget) Peak() int64 {
	if b == nil {
		return 0
	}
	return b.peak.Load()
}

func (b *Budget) add(n int64) { b.notePeak(b.used.Add(n)) }

func (b *Budget) notePeak(u int64) {
	for {
		p := b.peak.Load()
		if u <= p || b.peak.CompareAndSwap(p, u) {
			return
		}
	}
}

// give returns n bytes and wakes the links waiting for room.
func (b *Budget) give(n int64) {
	b.used.Add(-n)
	if b.waiting.Load() == 0 {
		return
	}
	b.mu.Lock()
	for _, l := range b.waiters {
		l.queued = false
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	clear(b.waiters)
	b.waiters = b.waiters[:0]
	b.waiting.Store(0)
	b.mu.Unlock()
}

// Size is what a delivery counts: the length of its data sections, at
// least one byte.
func Size(m *amqp.Message) int64 {
	var n int64
	if m != nil {
		for _, d := range m.Data {
			n += int64(len(d))
		}
	}
	return max(n, 1)
}

// Link is one receiver link's account. Grant, Settled and Close are called
// from one goroutine (the link's settler), Arrived from another (its pump).
type Link struct {
	b    *Budget
	wake chan struct{}

	// mu keeps credit and est consistent between a grant and an arrival
	// that changes what is reserved. An arrival of exactly est bytes, the
	// common case, changes nothing shared: it takes no lock (see Arrived).
	mu     sync.Mutex
	credit atomic.Int64 // granted under the budget, not arrived yet; raised under mu
	est    atomic.Int64 // the largest delivery seen; 0 until one arrives; written under mu
	closed atomic.Bool  // written under mu

	held   atomic.Int64 // bytes arrived, not settled
	total  atomic.Int64 // everything this link counts in b.used
	queued bool         // in b.waiters; guarded by b.mu
}

// Link opens the account of a new link (nil for a nil budget).
func (b *Budget) Link() *Link {
	if b == nil {
		return nil
	}
	b.links.Add(1)
	return &Link{b: b, wake: make(chan struct{}, 1)}
}

// Grant reserves up to want credits and returns how many it did: what the
// budget and the link's fair share have room for at its estimate, one when
// the estimate is unknown or the link holds nothing (see the package doc).
// A nil link grants all of want.
func (l *Link) Grant(want uint32) uint32 {
	if l == nil {
		return want
	}
	if want == 0 {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return 0
	}
	credit, est := l.credit.Load(), l.est.Load()
	idle := credit == 0 && l.held.Load() == 0
	if est == 0 {
		// Slow start: nothing is known about the size yet.
		if credit == 0 {
			l.credit.Store(1)
			return 1
		}
		return 0
	}
	b := l.b
	share := b.limit / max(b.links.Load(), 1)
	var k int64
	for {
		u := b.used.Load()
		room := min(b.limit-u, share-l.total.Load())
		k = min(int64(want), max(room, 0)/est)
		if k == 0 && idle {
			k = 1 // nothing held, no credit: never stuck
		}
		if k == 0 {
			return 0
		}
		if b.used.CompareAndSwap(u, u+k*est) {
			b.notePeak(u + k*est)
			break
		}
	}
	l.total.Add(k * est)
	l.credit.Add(k)
	return uint32(k)
}

// Arrived counts a delivery of size bytes (Size) in place of one credit's
// reservation. It reports whether this was the link's first delivery: its
// settler may grant by the estimate from now on.
//
// Only the pump calls Arrived, and only Arrived lowers credit or changes
// est, so a delivery of exactly est bytes on credit turns its reservation
// into held bytes without the lock or the shared counter: nothing the
// budget counts changes. (Should Close come in between, what this adds to
// the closed link's own counts is never read again.)
func (l *Link) Arrived(size int64) (first bool) {
	if l == nil {
		return false
	}
	if size == l.est.Load() && l.credit.Load() > 0 && !l.closed.Load() {
		l.credit.Add(-1)
		l.held.Add(size)
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return false
	}
	delta := size
	credit, est := l.credit.Load(), l.est.Load()
	if credit > 0 {
		credit = l.credit.Add(-1)
		delta -= est
	}
	if size > est {
		// The credit still out may bring deliveries as large as this one.
		first = est == 0
		delta += credit * (size - est)
		l.est.Store(size)
	}
	l.held.Add(size)
	l.total.Add(delta)
	l.b.add(delta)
	return first
}

// Settled gives back a delivery of size bytes.
func (l *Link) Settled(size int64) {
	if l == nil {
		return
	}
	if l.closed.Load() {
		return
	}
	l.held.Add(-size)
	l.total.Add(-size)
	l.b.give(size)
}

// Await asks to be woken (Wake) at the next settle of any link. A grant
// after Await that comes up short is not lost: the settle that frees room
// comes after the registration.
func (l *Link) Await() {
	if l == nil {
		return
	}
	b := l.b
	b.mu.Lock()
	if !l.queued {
		l.queued = true
		b.waiters = append(b.waiters, l)
		b.waiting.Add(1)
	}
	b.mu.Unlock()
}

// Wake is signalled after Await, when some link has given bytes back; nil
// for a nil link, which never signals.
func (l *Link) Wake() <-chan struct{} {
	if l == nil {
		return nil
	}
	return l.wake
}

// Bytes is what the link counts now: held and reserved.
func (l *Link) Bytes() int64 {
	if l == nil {
		return 0
	}
	return l.total.Load()
}

// Close gives back everything the link holds or reserved, at once (its
// link has ended: the peer has taken its deliveries back); later calls do
// nothing.
func (l *Link) Close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	if l.closed.Load() {
		l.mu.Unlock()
		return
	}
	l.closed.Store(true)
	l.credit.Store(0)
	n := l.total.Swap(0)
	l.held.Store(0)
	l.mu.Unlock()
	b := l.b
	b.mu.Lock()
	if l.queued {
		l.queued = false
		for i, w := range b.waiters {
			if w == l {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				b.waiting.Add(-1)
				break
			}
		}
	}
	b.mu.Unlock()
	b.links.Add(-1)
	b.give(n)
}
