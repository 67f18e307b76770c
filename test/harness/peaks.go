package harness

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/amqpactor/amqpactor"
)

// CountKind counts the nodes of the kind in app's tree, read within bound:
// a node that stops between its parent's answer and the ask for its own is
// waited for until the bound, so a tight one keeps a sampler going.
func CountKind(app *amqpactor.App, kind string, bound time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	root, err := app.Tree(ctx)
	if err != nil {
		return 0, err
	}
	return len(OfKind(root, kind)), nil
}

// Peaks is the highest count of the process's goroutines and of app's
// sender nodes that a sampler saw, every period from SamplePeaks until Stop.
type Peaks struct {
	Senders, Goroutines atomic.Int64
	stop, done          chan struct{}
	once                sync.Once
}

// SamplePeaks starts the sampler; each tree read is bounded by treeBound,
// and one that fails is skipped.
func SamplePeaks(app *amqpactor.App, period, treeBound time.Duration) *Peaks {
	p := &Peaks{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			if g := int64(runtime.NumGoroutine()); g > p.Goroutines.Load() {
				p.Goroutines.Store(g)
			}
			if n, err := CountKind(app, "sender", treeBound); err == nil && int64(n) > p.Senders.Load() {
				p.Senders.Store(int64(n))
			}
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

// Stop ends the sampler and waits for it to return.
func (p *Peaks) Stop() {
	p.once.Do(func() { close(p.stop) })
	<-p.done
}
