// Package ctxdone spreads the goroutines that wait for one context's end
// over several channels.
//
// Every publish waits for its answer, the App's stop and its context at
// once. When many publishers share one context (a service's root context,
// a worker pool's), they all park on its one Done channel, and every park
// and every wake-up takes that channel's lock. A Table hands each of eight
// shards its own channel, closed when the context is done. Each App owns
// one Table and closes it when it stops, so nothing outlives the App.
//
// A publish whose context a shard watches, or that has none that ends, can
// do better still and wait on its answer alone (Enlist): the table answers
// it when the context ends or the owner stops (Stop).
package ctxdone

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// shards is how many channels the waiters on one context spread over.
const shards = 8

// watch relays the end of the context whose Done channel is done.
type watch struct {
	done  <-chan struct{}
	ended chan struct{}               // closed once done is
	stop  atomic.Pointer[func() bool] // unregisters the relay, once registered
}

type shard struct {
	seen  atomic.Value // <-chan struct{}: the Done channel the shard saw last
	watch atomic.Pointer[watch]

	mu      sync.Mutex
	waiters *Waiter // enlisted, not yet answered; guarded by mu
}

// Table is one owner's shards. The zero value is ready to use; it must not
// be copied after first use.
type Table struct {
	shards  [shards]shard
	closed  atomic.Bool
	stopped atomic.Bool // Stop was called: every waiter is answered
}

// Shard returns a channel that is closed once ctx is done, to wait on in
// place of ctx.Done(); i picks the shard. A context seen on the shard for the
// second time in a row gets a channel of its own there, relayed by
// context.AfterFunc, while the shard has no other context's; else Shard
// returns ctx.Done() itself, as it does once the table is closed. It
// returns nil for a context that is never done.
func (t *Table) Shard(ctx context.Context, i uint32) <-chan struct{} {
	done := ctx.Done()
	if done == nil {
		return nil
	}
	s := &t.shards[i%shards]
	if w := s.watch.Load(); w != nil {
		if w.done == done {
			return w.ended
		}
		return done // the shard is another context's until it ends
	}
	if s.seen.Load() != any(done) || t.closed.Load() {
		// A context used once (a request's, say) is not worth a watch.
		s.seen.Store(done)
		return done
	}
	w := &watch{done: done, ended: make(chan struct{})}
	if !s.watch.CompareAndSwap(nil, w) {
		return done
	}
	stop := context.AfterFunc(ctx, func() {
		close(w.ended)
		s.watch.CompareAndSwap(w, nil)
		s.sweep(done, ErrEnded)
	})
	w.stop.Store(&stop)
	if t.closed.Load() {
		// Closed meanwhile: Close may have missed this watch.
		t.drop(s, w)
	}
	return w.ended
}

// Close unregisters the relays of contexts not yet done, so that a context
// that lives on (a service's root) keeps nothing of the table, and makes
// Shard hand out Done channels from then on; it stops the table first. Call
// it once nobody waits on a channel Shard returned: a relay it unregisters
// never closes its channel.
func (t *Table) Close() {
	t.Stop()
	t.closed.Store(true)
	for i := range t.shards {
		s := &t.shards[i]
		if w := s.watch.Load(); w != nil {
			t.drop(s, w)
		}
		s.seen.Store((<-chan struct{})(nil))
	}
}

// drop unregisters w's relay. A watch not registered yet is dropped by the
// Shard call registering it, which checks closed after it has.
func (t *Table) drop(s *shard, w *watch) {
	if stop := w.stop.Load(); stop != nil {
		(*stop)()
	}
	s.watch.CompareAndSwap(w, nil)
}

// Watching is how many shards relay a context now.
func (t *Table) Watching() int {
	n := 0
	for i := range t.shards {
		if t.shards[i].watch.Load() != nil {
			n++
		}
	}
	return n
}

// ErrEnded and ErrStopped are the answers a Waiter gets from the table
// rather than from whoever it waits for: its context ended, or Stop was
// called.
var (
	ErrEnded   = errors.New("ctxdone: the context ended")
	ErrStopped = errors.New("ctxdone: the table stopped")
)

// Waiter is a goroutine that waits for one answer on Done alone, where it
// would otherwise select on its answer, its context and its owner's stop: a
// plain receive is cheaper than a select, and a publish waits once per
// message. Whoever answers calls Answered
// first, so that only one answer is ever sent. The zero value is ready once
// Done is set (capacity 1); reuse it only after its answer is read and it is
// delisted.
type Waiter struct {
	Done     chan error
	answered atomic.Bool

	// Guarded by the shard's mu.
	ctx        <-chan struct{} // the watched Done channel; nil: no context
	prev, next *Waiter
	listed     bool
}

// Answered is the flag that whoever answers w swaps first (Publish.Once):
// the one that swaps it sends the one answer on Done.
func (w *Waiter) Answered() *atomic.Bool { return &w.answered }

// give sends err on Done unless w has its answer already.
func (w *Waiter) give(err error) {
	if w.answered.CompareAndSwap(false, true) {
		w.Done <- err
	}
}

// Enlist readies w for a wait on w.Done alone when ctx is watched on shard i
// (see Shard) or never done; ErrEnded or ErrStopped arrive there once ctx
// ends or Stop is called. For any other context, or once the table is
// closed, it enlists nothing and returns what Shard does, for the caller to
// select on as before. Enlist w before anyone may answer it.
func (t *Table) Enlist(ctx context.Context, i uint32, w *Waiter) (ended <-chan struct{}, ok bool) {
	done := ctx.Done()
	s := &t.shards[i%shards]
	if done != nil {
		if wa := s.watch.Load(); wa == nil || wa.done != done {
			return t.Shard(ctx, i), false
		}
	}
	if t.closed.Load() {
		return t.Shard(ctx, i), false
	}
	w.answered.Store(false)
	s.mu.Lock()
	w.ctx, w.listed = done, true
	w.prev, w.next = nil, s.waiters
	if s.waiters != nil {
		s.waiters.prev = w
	}
	s.waiters = w
	s.mu.Unlock()
	// A sweep that ran before w was listed missed it: the context's end
	// and Stop are both visible by then.
	if t.stopped.Load() {
		s.answer(w, ErrStopped)
	} else if done != nil && ctx.Err() != nil {
		s.answer(w, ErrEnded)
	}
	return nil, true
}

// Delist takes w off shard i once its answer is read.
func (t *Table) Delist(i uint32, w *Waiter) {
	s := &t.shards[i%shards]
	s.mu.Lock()
	s.unlink(w)
	s.mu.Unlock()
}

// Stop answers every waiter enlisted, and every one enlisted from now on,
// with ErrStopped: nobody else will answer them.
func (t *Table) Stop() {
	t.stopped.Store(true)
	for i := range t.shards {
		t.shards[i].sweep(nil, ErrStopped)
	}
}

// sweep answers, with err, the waiters of the context whose Done channel is
// done, or every waiter when done is nil.
func (s *shard) sweep(done <-chan struct{}, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := s.waiters; w != nil; {
		next := w.next
		if done == nil || w.ctx == done {
			s.unlink(w)
			w.give(err)
		}
		w = next
	}
}

func (s *shard) answer(w *Waiter, err error) {
	s.mu.Lock()
	s.unlink(w)
	s.mu.Unlock()
	w.give(err)
}

// unlink takes w off the list; the caller holds mu.
func (s *shard) unlink(w *Waiter) {
	if !w.listed {
		return
	}
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		s.waiters = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	}
	w.prev, w.next, w.ctx, w.listed = nil, nil, nil, false
}
