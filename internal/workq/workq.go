// Package workq is the hand-off between an actor and the goroutine it owns
// for blocking work: an unbounded FIFO whose Push never blocks, so an actor's
// Receive never waits on its worker.
package workq

import "sync"

// Q is an unbounded FIFO with one consumer. The zero value is not usable; use New.
type Q[T any] struct {
	mu     sync.Mutex
	items  []T
	spare  []T
	closed bool
	notify chan struct{}
}

// New returns an empty queue.
func New[T any]() *Q[T] { return &Q[T]{notify: make(chan struct{}, 1)} }

// Push appends v. It reports false when the queue is closed.
func (q *Q[T]) Push(v T) bool { return q.push(v, false) }

// PushAll appends vs in order, in one step. It reports false when the
// queue is closed (nothing is appended then).
func (q *Q[T]) PushAll(vs []T) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, vs...)
	q.mu.Unlock()
	q.wake()
	return true
}

// wake tells the consumer there is something to take, unless it has been
// told already: notify holds one signal at most.
func (q *Q[T]) wake() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// Ready is signalled when items may be waiting.
func (q *Q[T]) Ready() <-chan struct{} { return q.notify }

// Take removes and returns everything queued, and whether the queue is
// closed. The returned slice is valid until the next Take.
func (q *Q[T]) Take() ([]T, bool) {
	q.mu.Lock()
	items := q.items
	q.items = q.spare[:0]
	q.spare = items
	closed := q.closed
	q.mu.Unlock()
	return items, closed
}

// Len reports how many items wait.
func (q *Q[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// PushClose appends v and closes the queue in one step, so that nothing
// pushed concurrently can come after v. It reports false when the queue was
// closed already.
func (q *Q[T]) PushClose(v T) bool { return q.push(v, true) }

func (q *Q[T]) push(v T, last bool) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, v)
	q.closed = last
	q.mu.Unlock()
	q.wake()
	return true
}

// Close stops further pushes and wakes the consumer; items already queued
// can still be taken.
func (q *Q[T]) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wake()
}
