package harness

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/amqpactor/amqpactor"
)

// Blocker is a handler that holds every message until Release (or until its
// context ends), counting the messages it let through.
type Blocker struct {
	release chan struct{}
	once    sync.Once
	handled atomic.Int64
}

func NewBlocker() *Blocker { return &Blocker{release: make(chan struct{})} }

// Handle is the handler.
func (b *Blocker) Handle(ctx context.Context, m *amqpactor.Message) error {
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	b.handled.Add(1)
	return nil
}

// Release lets every message through, now and from now on; it may be called
// more than once (a deferred call, should an assertion fail first).
func (b *Blocker) Release() { b.once.Do(func() { close(b.release) }) }

// Handled is how many messages Handle let through.
func (b *Blocker) Handled() int64 { return b.handled.Load() }

// HeapInuse is the heap in use after a collection.
func HeapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}
