// Package ctxdone spreads the goroutines that wait for one context's end
// over several channels.
//
// Every publish waits for its answer, the App's stop and its context at
// once. When many publishers share one context (a service's root context,
// a worker pool's), they all park on its one Done channel, and every park
// and every wake-up takes that channel's lock: in-process, with 64
// publishers, that lock was a twentieth of the CPU. Shard hands each of
// eight shards its own channel, closed when the context is done.
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
	ended chan struct{} // closed once done is
}

type shard struct {
	seen  atomic.Value // <-chan struct{}: the Done channel the shard saw last
	watch atomic.Pointer[watch]
}

// The shards are the process's, not an App's: a context that is never
// done keeps its watches, at most one per shard, for good.
var table [shards]shard

// Shard returns a channel that is closed once ctx is done, to wait on in
// place of ctx.Done(); i picks the shard. A context seen on the shard for the
// second time in a row gets a channel of its own there, relayed by
// context.AfterFunc, while the shard has no other context's; else Shard
// returns ctx.Done() itself. It returns nil for a context that is never
// done.
func Shard(ctx context.Context, i uint32) <-chan struct{} {
	done := ctx.Done()
	if done == nil {
		return nil
	}
	s := &table[i%shards]
	if w := s.watch.Load(); w != nil {
		if w.done == done {
			return w.ended
		}
		return done // the shard is another context's until it ends
	}
	if s.seen.Load() != any(done) {
		// A context used once (a request's, say) is not worth a watch.
		s.seen.Store(done)
		return done
	}
	w := &watch{done: done, ended: make(chan struct{})}
	if !s.watch.CompareAndSwap(nil, w) {
		return done
	}
	context.AfterFunc(ctx, func() {
		close(w.ended)
		s.watch.CompareAndSwap(w, nil)
	})
	return w.ended
}
