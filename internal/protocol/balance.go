package protocol

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/address"
)

// Balance is shared by the receivers of one Partitioned subscription's
// partition queues (one per queue, SubscriptionSpec.Partition its index), so
// that one of them can count what this replica holds and hand partitions
// over to other replicas (actors/receiver, balance.go).
type Balance struct {
	// Census is the queue whose consumers are the replicas: partition 0's
	// receiver of each attaches to it, without credit.
	Census address.Address

	mu    sync.Mutex
	parts []BalancePart
}

// BalancePart is what one partition's receiver tells its Balance.
type BalancePart struct {
	// PID is the receiver's; nil while it has no link.
	PID *actor.PID
	// Held reports whether this replica is the partition queue's active
	// consumer now. It is safe to call from any goroutine.
	Held func() bool
	// Handing is when a hand-over of the partition was asked for; zero
	// when none is in progress.
	Handing time.Time
}

// NewBalance returns the Balance of n partitions.
func NewBalance(census address.Address, n int) *Balance {
	return &Balance{Census: census, parts: make([]BalancePart, n)}
}

// Set records part i.
func (b *Balance) Set(i int, p BalancePart) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i >= 0 && i < len(b.parts) {
		b.parts[i] = p
	}
}

// Clear forgets part i's link, if pid still holds it.
func (b *Balance) Clear(i int, pid *actor.PID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i >= 0 && i < len(b.parts) && b.parts[i].PID == pid {
		b.parts[i] = BalancePart{}
	}
}

// Parts returns a copy of every part.
func (b *Balance) Parts() []BalancePart {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]BalancePart(nil), b.parts...)
}

// Handing marks part i as being handed over, at now.
func (b *Balance) Handing(i int, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i >= 0 && i < len(b.parts) {
		b.parts[i].Handing = now
	}
}

// Handover asks a partition's receiver to give its partition queue to
// another replica: it stops taking deliveries, waits until every one it took
// is settled, then detaches and attaches again, behind the consumers
// waiting on the queue.
type Handover struct{}
