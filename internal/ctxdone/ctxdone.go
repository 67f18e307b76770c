// Package ctxdone spreads the goroutines that wait for one context's end
// over several channels.
//
// Every publish waits for its answer, the App's stop and its context at
// once. When many publishers share one context (a service's root context,
// a worker pool's), they all park on its one Done channel, and every park
// and every wake-up takes that channel's lock. A Table hands each of eight
// shards its own channel, closed when the context is done. Each App owns
// one Table and closes it when it stops, so nothing outlives the App.
package ctxdone

import (
	"context"
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
}

// Table is one owner's shards. The zero value is ready to use; it must not
// be copied after first use.
type Table struct {
	shards [shards]shard
	closed atomic.Bool
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
// Shard hand out Done channels from then on. Call it once nobody waits on a
// channel Shard returned: a relay it unregisters never closes its channel.
func (t *Table) Close() {
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
