package actors

import (
	"sync"
)

// Pool is the actor dispatcher of an App: mailboxes run on long-lived
// goroutines instead of a new goroutine per scheduling. A fresh goroutine
// starts with a small stack and grows it again on every run, on the path of
// every message; pooled ones keep theirs.
// When every worker is busy a mailbox runs on a new goroutine, so the pool
// never queues and never blocks a sender.
type Pool struct {
	work chan func()
	n    int
	wg   sync.WaitGroup
	once sync.Once
}

// NewPool starts n workers.
func NewPool(n int) *Pool {
	p := &Pool{work: make(chan func()), n: n}
	p.wg.Add(n)
	for range n {
		go p.worker()
	}
	return p
}

// worker runs what it is handed until it is handed nil. One channel, not a
// select over work and a quit channel: a plain receive is cheaper than a
// select, and every message a mailbox runs passes here.
func (p *Pool) worker() {
	defer p.wg.Done()
	for fn := range p.work {
		if fn == nil {
			return
		}
		fn()
	}
}

// Schedule implements actor.Dispatcher.
func (p *Pool) Schedule(fn func()) {
	select {
	case p.work <- fn:
	default:
		go fn()
	}
}

// Throughput implements actor.Dispatcher: messages per mailbox run.
func (p *Pool) Throughput() int { return 300 }

// Close stops the workers and waits for them. Mailboxes scheduled later run
// on goroutines of their own.
func (p *Pool) Close() {
	p.once.Do(func() {
		for range p.n {
			p.work <- nil
		}
	})
	p.wg.Wait()
}
