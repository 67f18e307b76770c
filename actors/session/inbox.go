package session

import (
	"sync"

	"github.com/amqpactor/amqpactor/internal/protocol"
)

// inbox is where the App's publisher leaves replies for its replies
// publisher: a publish sent to a mailbox is dropped with it when that actor
// stops, while one left here is taken by the replies publisher (woken by
// wakeReplies) or, once it is gone, by the publisher again (shut), which
// routes it anew.
type inbox struct {
	// mu guards ps and shut, which the two publishers' mailbox runs share:
	// whoever takes a publish owns it.
	mu   sync.Mutex
	ps   []*protocol.Publish
	shut bool
}

// wakeReplies tells the replies publisher that its inbox has publishes.
type wakeReplies struct{}

// put leaves p; wake reports that nothing was there before (the replies
// publisher must be woken), ok that the inbox is not shut.
func (b *inbox) put(p *protocol.Publish) (ok, wake bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shut {
		return false, false
	}
	b.ps = append(b.ps, p)
	return true, len(b.ps) == 1
}

// take returns what was left, in order.
func (b *inbox) take() []*protocol.Publish {
	b.mu.Lock()
	defer b.mu.Unlock()
	ps := b.ps
	b.ps = nil
	return ps
}

// close shuts the inbox for good and returns what was left.
func (b *inbox) close() []*protocol.Publish {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.shut = true
	ps := b.ps
	b.ps = nil
	return ps
}
