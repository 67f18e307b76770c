package publish

import (
	"sync"
	"sync/atomic"

	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/workq"
)

// Lane takes publishes past the sender's mailbox. While a Link is started,
// Offer puts a publish straight on its writer's queue, sparing it the
// mailbox hop (a lock, a wake-up of an actor and another queue). The actor
// still owns the link: Start opens the lane
// after what waited for the link, and Stop and Finish close it before they
// take back what the writer did not send, so a publish on the lane is either
// written, handed back to the actor, or refused (Offer reports false and the
// caller sends it to the actor instead).
//
// While no Link is started, the publisher parks publishes on the lane (Park)
// and wakes the sender, which takes them (TakeParked). Parked publishes are
// never lost with the sender: a sender that stops takes them with what
// waits, and once it is gone the publisher takes what is left (Shut) and
// routes it anew, where a publish sent to its mailbox would have been
// dropped with it.
type Lane struct {
	// q is the started Link's writer queue, nil while none is: the actor
	// stores it (Start, Stop, Finish, Close), any goroutine loads it (Offer).
	q atomic.Pointer[workq.Q[job]]
	// used is counted by Offer and read by the actor's idle check.
	used atomic.Uint64

	// mu guards parked and shut, which the publisher's and the sender's
	// mailbox runs share: whoever takes a parked publish owns it.
	mu     sync.Mutex
	parked []*protocol.Publish
	shut   bool
}

// NewLane returns a closed lane.
func NewLane() *Lane { return new(Lane) }

// Offer queues p on the started Link's writer, or reports false.
func (l *Lane) Offer(p *protocol.Publish) bool {
	q := l.q.Load()
	if q != nil && q.Push(job{p: p}) {
		l.used.Add(1)
		return true
	}
	return false
}

// Used counts the publishes Offer took: it changes while the lane is used.
func (l *Lane) Used() uint64 { return l.used.Load() }

// Park keeps p for the sender, which takes it when woken. wake reports that
// the sender must be woken (nothing was parked before); ok is false once
// the lane is shut (the sender is gone).
func (l *Lane) Park(p *protocol.Publish) (ok, wake bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shut {
		return false, false
	}
	l.parked = append(l.parked, p)
	return true, len(l.parked) == 1
}

// Shut closes the lane for good and returns what was parked on it: its
// sender has stopped.
func (l *Lane) Shut() []*protocol.Publish {
	l.q.Store(nil)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shut = true
	ps := l.parked
	l.parked = nil
	return ps
}

// Close refuses offers until the next Start: the sender is letting go of
// its link, or has none.
func (l *Lane) Close() { l.q.Store(nil) }

// TakeParked returns what is parked, in order, for the sender.
func (l *Lane) TakeParked() []*protocol.Publish {
	l.mu.Lock()
	defer l.mu.Unlock()
	ps := l.parked
	l.parked = nil
	return ps
}
