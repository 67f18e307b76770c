package harness

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/amqpactor/amqpactor"
)

// PublishTimeout bounds each publish of a Publisher.
const PublishTimeout = 20 * time.Second

// Publisher publishes ids, each as a durable message whose id and body are
// the id, from several goroutines; Wait waits for all of them.
type Publisher struct {
	Confirmed, Errors atomic.Int64
	wg                sync.WaitGroup
	mu                sync.Mutex
	lastErr           error
}

// PublishAll publishes all to q from workers goroutines until ctx ends. With
// retry a publish that fails is counted and tried again, so that every id is
// eventually published with a nil return (the fault tests then want none
// lost); without, a failure is counted and the id given up (the cluster
// tests want no failure at all).
func PublishAll(ctx context.Context, app *amqpactor.App, q amqpactor.Address, all []string, workers int, retry bool) *Publisher {
	p := &Publisher{}
	ch := make(chan string)
	for range workers {
		p.wg.Go(func() {
			for id := range ch {
				for ctx.Err() == nil {
					pctx, cancel := context.WithTimeout(ctx, PublishTimeout)
					err := app.Publish(pctx, q, &amqpactor.Message{MessageID: id, Body: []byte(id), Durable: true})
					cancel()
					if err == nil {
						p.Confirmed.Add(1)
						break
					}
					p.Errors.Add(1)
					p.mu.Lock()
					p.lastErr = err
					p.mu.Unlock()
					if !retry {
						break
					}
				}
			}
		})
	}
	go func() {
		defer close(ch)
		for _, id := range all {
			select {
			case ch <- id:
			case <-ctx.Done():
				return
			}
		}
	}()
	return p
}

// Wait returns once every worker has returned.
func (p *Publisher) Wait() { p.wg.Wait() }

// Err is the last publish error.
func (p *Publisher) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}
