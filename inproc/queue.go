package inproc

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/amqpactor/amqpactor/address"
)

// entry is one message on one queue: the broker's copy of the message
// (shared, never mutated, between the entries a topic fans out) plus this
// queue's delivery state. An
// entry has exactly one owner at a time (its queue, or the receiver link it
// was transferred to) and is only touched under that owner's lock.
type entry struct {
	msg *stored
	seq uint64 // position on its queue, kept when it goes back
	// count is the header delivery-count: earlier failed attempts.
	count uint32
	// delivered is set once a receiver has taken it: later deliveries carry
	// first-acquirer false.
	delivered bool
	// excl lists receivers that answered modified{undeliverable-here}.
	excl []uint64
}

func (e *entry) excludes(id uint64) bool {
	return slices.Contains(e.excl, id)
}

// deque is a ring buffer of entries.
type deque struct {
	buf  []*entry
	head int
	n    int
}

func (d *deque) len() int { return d.n }

func (d *deque) grow() {
	size := len(d.buf) * 2
	if size == 0 {
		size = 16
	}
	nb := make([]*entry, size)
	for i := 0; i < d.n; i++ {
		nb[i] = d.buf[(d.head+i)&(len(d.buf)-1)]
	}
	d.buf, d.head = nb, 0
}

func (d *deque) pushBack(e *entry) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.buf[(d.head+d.n)&(len(d.buf)-1)] = e
	d.n++
}

func (d *deque) pushFront(e *entry) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.head = (d.head - 1) & (len(d.buf) - 1)
	d.buf[d.head] = e
	d.n++
}

// insertAt puts e at position i (0 is the front), moving the i entries
// before it one place towards the front.
func (d *deque) insertAt(i int, e *entry) {
	d.pushFront(e)
	for j := 0; j < i; j++ {
		d.buf[(d.head+j)&(len(d.buf)-1)] = d.buf[(d.head+j+1)&(len(d.buf)-1)]
	}
	d.buf[(d.head+i)&(len(d.buf)-1)] = e
}

func (d *deque) popFront() *entry {
	e := d.buf[d.head]
	d.buf[d.head] = nil
	d.head = (d.head + 1) & (len(d.buf) - 1)
	d.n--
	return e
}

func (d *deque) at(i int) *entry { return d.buf[(d.head+i)&(len(d.buf)-1)] }

// removeAt removes the i-th entry, keeping the order of the rest.
func (d *deque) removeAt(i int) *entry {
	e := d.at(i)
	for j := i; j > 0; j-- {
		d.buf[(d.head+j)&(len(d.buf)-1)] = d.buf[(d.head+j-1)&(len(d.buf)-1)]
	}
	d.buf[d.head] = nil
	d.head = (d.head + 1) & (len(d.buf) - 1)
	d.n--
	return e
}

// drain removes and returns every entry in order.
func (d *deque) drain() []*entry {
	out := make([]*entry, 0, d.n)
	for d.n > 0 {
		out = append(out, d.popFront())
	}
	return out
}

// queue is an anycast node: a queue, a dynamic reply node or one topic
// subscription (durable and shared, or one link's own). Its lock guards the waiting messages, the consumers and their
// credit; a receiver's own lock nests inside it, never the other way round.
type queue struct {
	id   uint64
	name string
	// temporary queues (dynamic nodes, ephemeral topic subscriptions) die
	// with their link; their messages go with them.
	temporary bool
	// single (a partition queue, set under mu by the first receiver that
	// asks for it) delivers only to cons[0], the receiver attached first;
	// when it detaches, the next one in attach order takes over.
	single bool
	// bound: a durable topic subscription, in its topic's list; guarded by
	// the Broker's mu.
	bound bool
	// keys, set for a topic subscription bound by pattern, pick the
	// messages of its topic it gets; nil: all of them.
	keys atomic.Pointer[address.BindingKeys]

	gone atomic.Bool     // deleted: senders drop their cached pointer
	out  atomic.Int64    // transferred to receivers and not yet settled
	mu   sync.Mutex      // guards everything below
	msgs deque           // waiting, head first
	cons []*receiverLink // attached receivers, round robin
	rr   int
	// credit is the sum of the consumers' credit.
	credit  uint64
	nExcl   int // entries in msgs with a non-empty excl
	nextSeq uint64
	deleted bool
	dead    []deadLetter
	expired uint64 // dropped undelivered, past their expiry
	// ttl is set once a message with an expiry entered the queue: from then
	// on every dispatch reads the clock and checks each message it hands
	// out. A queue that never had one pays nothing.
	ttl bool
}

type deadLetter struct {
	e                      *entry
	condition, description string
}

// publish stores e and hands it on if a receiver has credit.
func (q *queue) publish(e *entry) {
	q.mu.Lock()
	q.enqueueLocked(e)
	q.dispatchLocked()
	q.mu.Unlock()
}

// enqueueLocked appends e to the tail without dispatching.
func (q *queue) enqueueLocked(e *entry) bool {
	if q.deleted {
		return false
	}
	e.seq = q.nextSeq
	q.nextSeq++
	q.msgs.pushBack(e)
	if e.msg.expires != 0 {
		q.ttl = true
	}
	return true
}

// now is the clock for expiry checks (Unix ms), or 0 when no message of the
// queue ever had an expiry.
func (q *queue) now() int64 {
	if !q.ttl {
		return 0
	}
	return time.Now().UnixMilli()
}

// dropLocked forgets e, a waiting message that expired.
func (q *queue) dropLocked(e *entry) {
	if len(e.excl) > 0 {
		q.nExcl--
	}
	q.expired++
}

// dropExpiredHeadLocked drops the expired messages at the head, so that a
// queue nobody consumes does not hold its expired messages for ever when
// they expire in order (as requests with the same deadline do).
func (q *queue) dropExpiredHeadLocked(now int64) {
	for q.msgs.len() > 0 && q.msgs.at(0).msg.expiredAt(now) {
		q.dropLocked(q.msgs.popFront())
	}
}

// purgeExpiredLocked drops every expired waiting message, keeping the order
// of the rest.
func (q *queue) purgeExpiredLocked() {
	now := q.now()
	if now == 0 {
		return
	}
	for range q.msgs.len() {
		e := q.msgs.popFront()
		if e.msg.expiredAt(now) {
			q.dropLocked(e)
			continue
		}
		q.msgs.pushBack(e)
	}
}

// requeueLocked puts entries that were out for delivery back at the head of
// the queue, in their original order.
func (q *queue) requeueLocked(es []*entry) {
	if len(es) > 1 {
		slices.SortFunc(es, func(a, b *entry) int {
			switch {
			case a.seq < b.seq:
				return -1
			case a.seq > b.seq:
				return 1
			}
			return 0
		})
	}
	q.out.Add(-int64(len(es)))
	if q.deleted {
		return
	}
	for i := len(es) - 1; i >= 0; i-- {
		if len(es[i].excl) > 0 {
			q.nExcl++
		}
		// Behind the older ones already back at the head: entries given
		// back one at a time in their order (a drain's releases) keep it.
		at := 0
		for at < q.msgs.len() && q.msgs.at(at).seq < es[i].seq {
			at++
		}
		q.msgs.insertAt(at, es[i])
	}
	q.dispatchLocked()
}

// candidatesLocked is how many consumers, from q.cons[q.rr] round robin,
// may be given a message: on a single-active-consumer queue only the first
// attached, the active one.
func (q *queue) candidatesLocked() int {
	n := len(q.cons)
	if q.single && n > 1 {
		n = 1
		q.rr = 0
	}
	return n
}

// nextConsumerLocked picks the next consumer with credit, round robin.
func (q *queue) nextConsumerLocked() *receiverLink {
	n := q.candidatesLocked()
	for i := range n {
		k := (q.rr + i) % n
		if r := q.cons[k]; r.credit > 0 {
			q.rr = (k + 1) % n
			return r
		}
	}
	return nil
}

// dispatchLocked transfers waiting messages to consumers with credit until
// either runs out.
//
// An expired message is dropped instead of handed out (now is 0 when the
// queue never had a message with an expiry).
func (q *queue) dispatchLocked() {
	now := q.now()
	if now != 0 {
		q.dropExpiredHeadLocked(now)
	}
	for q.msgs.len() > 0 && q.credit > 0 {
		if q.nExcl > 0 {
			if !q.dispatchExclLocked(now) {
				return
			}
			continue
		}
		r := q.nextConsumerLocked()
		if r == nil {
			return
		}
		k := 1
		if len(q.cons) == 1 || q.single {
			k = int(min(r.credit, uint64(q.msgs.len())))
		}
		moved := 0
		r.mu.Lock()
		for range k {
			e := q.msgs.popFront()
			if now != 0 && e.msg.expiredAt(now) {
				q.dropLocked(e)
				continue
			}
			r.buf.pushBack(e)
			moved++
		}
		// Counted out before the receiver can take (and settle) them.
		q.out.Add(int64(moved))
		r.mu.Unlock()
		r.credit -= uint64(moved)
		q.credit -= uint64(moved)
		if moved > 0 {
			r.notify()
		}
	}
}

// dispatchExclLocked is the slow path when some waiting message must skip
// some receiver: it gives the next consumer with credit the first message it
// may have. It reports whether it transferred anything.
func (q *queue) dispatchExclLocked(now int64) bool {
	n := q.candidatesLocked()
	for i := range n {
		k := (q.rr + i) % n
		r := q.cons[k]
		if r.credit == 0 {
			continue
		}
		for j := 0; j < q.msgs.len(); j++ {
			if now != 0 && q.msgs.at(j).msg.expiredAt(now) {
				q.dropLocked(q.msgs.removeAt(j))
				j--
				continue
			}
			if q.msgs.at(j).excludes(r.id) {
				continue
			}
			e := q.msgs.removeAt(j)
			if len(e.excl) > 0 {
				q.nExcl--
			}
			q.rr = (k + 1) % n
			r.credit--
			q.credit--
			q.out.Add(1)
			r.mu.Lock()
			r.buf.pushBack(e)
			r.mu.Unlock()
			r.notify()
			return true
		}
	}
	return false
}

// addConsumerLocked attaches r.
func (q *queue) addConsumerLocked(r *receiverLink) {
	q.cons = append(q.cons, r)
	if q.single && r.onActive != nil {
		r.onActive(len(q.cons) == 1)
	}
}

// removeConsumerLocked detaches r and forgets its credit and its
// undeliverable-here marks.
func (q *queue) removeConsumerLocked(r *receiverLink) {
	if i := slices.Index(q.cons, r); i >= 0 {
		q.cons = slices.Delete(q.cons, i, i+1)
		if i == 0 && q.single && len(q.cons) > 0 && q.cons[0].onActive != nil {
			// The next in attach order takes over, as it is told.
			q.cons[0].onActive(true)
		}
		if q.rr > i {
			q.rr--
		}
		if len(q.cons) > 0 {
			q.rr %= len(q.cons)
		} else {
			q.rr = 0
		}
	}
	q.credit -= r.credit
	r.credit = 0
	if q.nExcl == 0 {
		return
	}
	for i := 0; i < q.msgs.len(); i++ {
		e := q.msgs.at(i)
		if j := slices.Index(e.excl, r.id); j >= 0 {
			e.excl = slices.Delete(e.excl, j, j+1)
			if len(e.excl) == 0 {
				e.excl = nil
				q.nExcl--
			}
		}
	}
}

// deleteLocked removes a temporary queue: its messages are dropped.
func (q *queue) deleteLocked() {
	q.deleted = true
	q.gone.Store(true)
	q.msgs = deque{}
	q.nExcl = 0
}

// topic is a multicast address: a copy-on-write list of subscription queues.
type topic struct {
	name string
	mu   sync.Mutex // serialises writers of subs
	subs atomic.Pointer[[]*queue]
}

func (t *topic) snapshot() []*queue {
	if p := t.subs.Load(); p != nil {
		return *p
	}
	return nil
}

// publish gives every subscription whose binding keys match the message's
// subject its own entry; the stored message is shared, being immutable, and
// each delivery copies it.
func (t *topic) publish(s *stored) {
	for _, q := range t.snapshot() {
		if k := q.keys.Load(); k != nil && !k.Match(s.subject()) {
			continue
		}
		q.publish(s.entry())
	}
}

// bind sets the binding keys of a topic subscription's queue.
func (q *queue) bind(keys address.BindingKeys) {
	if keys.All() {
		q.keys.Store(nil)
		return
	}
	q.keys.Store(&keys)
}

func (t *topic) add(q *queue) {
	t.mu.Lock()
	old := t.snapshot()
	next := make([]*queue, len(old), len(old)+1)
	copy(next, old)
	next = append(next, q)
	t.subs.Store(&next)
	t.mu.Unlock()
}

func (t *topic) remove(q *queue) {
	t.mu.Lock()
	old := t.snapshot()
	if i := slices.Index(old, q); i >= 0 {
		next := make([]*queue, 0, len(old)-1)
		next = append(next, old[:i]...)
		next = append(next, old[i+1:]...)
		t.subs.Store(&next)
	}
	t.mu.Unlock()
}
