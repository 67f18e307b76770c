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
	guard guard
}

// The guard against a census that counts consumers that are no replicas:
// each replica's share is then too small for every partition to be held,
// and the partitions would go round the replicas for as long as it lasts.
const (
	// backWithin: a partition this replica handed over that it holds
	// again this soon, the census unchanged, came straight back.
	backWithin = 30 * time.Second
	// guardWindow is the window in which a replica hands over at most
	// budgetPer times as many partitions as there are: one that first
	// held them all and balanced as others joined, left and joined again
	// can have handed over nearly every one already.
	guardWindow = time.Minute
	budgetPer   = 2
	// pauseFirst is how long hand-overs stop the first time the guard
	// trips; each trip again at the same census doubles it, up to
	// pauseMax.
	pauseFirst = time.Minute
	pauseMax   = 16 * time.Minute
)

// guard is what the Balance remembers of this replica's hand-overs; it
// outlives the receivers' links and incarnations. Guarded by Balance.mu.
type guard struct {
	handed []handoff   // per part: this replica's last hand-over of it
	asked  []time.Time // hand-overs asked for within guardWindow
	// until: no hand-over before it, unless the census drops below
	// census (a consumer left); pause is the length of the last one.
	until  time.Time
	census int
	pause  time.Duration
	// last is the census read last; suspect: at that read, a part had
	// come back.
	last    int
	suspect bool
}

type handoff struct {
	at     time.Time // asked for, then done
	census int       // the census it was asked for at
}

// HandoverPause is why a replica stopped handing partitions over.
type HandoverPause struct {
	// Part is the partition that came back; -1 when the replica asked
	// for more hand-overs in guardWindow than its budget.
	Part int
	// Census is the consumer count the census queue said.
	Census int
	// For is how long no partition is handed over.
	For time.Duration
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

// CensusOf is the queue by whose consumer count the replicas subscribed to
// the Partitioned address addr count themselves: NAME.replicas, a plain
// queue nothing is sent to.
func CensusOf(addr address.Address) address.Address { return address.Queue(addr.Name() + ".replicas") }

// NewBalance returns the Balance of n partitions.
func NewBalance(census address.Address, n int) *Balance {
	return &Balance{Census: census, parts: make([]BalancePart, n), guard: guard{handed: make([]handoff, n)}}
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

// Handing marks part i as being handed over, at now; a zero now says the
// receiver did not hand it over after all, which the guard forgets.
func (b *Balance) Handing(i int, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i >= 0 && i < len(b.parts) {
		b.parts[i].Handing = now
		if now.IsZero() {
			b.guard.handed[i] = handoff{}
		}
	}
}

// HandOver records that this replica asks for part i's hand-over at now,
// the census being census.
func (b *Balance) HandOver(i int, now time.Time, census int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i >= 0 && i < len(b.parts) {
		b.parts[i].Handing = now
		b.guard.handed[i] = handoff{at: now, census: census}
		b.guard.asked = append(b.guard.asked, now)
	}
}

// HandedOver records that part i's link let go of the queue at now: it is
// from then on that a return is straight back.
func (b *Balance) HandedOver(i int, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i >= 0 && i < len(b.parts) && !b.guard.handed[i].at.IsZero() {
		b.guard.handed[i].at = now
	}
}

// MayHandOver reports whether this replica, which holds the parts held
// and would hand surplus of them over, may do so at now, census being the
// consumer count just read. It may not while paused, nor when a part it
// handed over came straight back (every other replica in line handed it
// over too: none can hold its share, so the census counts more than the
// replicas) or surplus would take it over its budget in guardWindow: then it
// pauses, and pause says why (nil while a pause goes on).
//
// A census that changed voids what was handed over before: replicas came
// or went, and a part may come back because the one holding it left. As
// the census of one that left can outlive its partition links, a part that
// came back is taken for a wrong census only if the next read says the same.
func (b *Balance) MayHandOver(now time.Time, census int, held []int, surplus int) (ok bool, pause *HandoverPause) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := &b.guard
	if now.Before(g.until) {
		if census == g.census {
			return false, nil
		}
		// A consumer of the census came or left (a replica joined, one
		// stopped): balance again, within the budget.
		g.until = time.Time{}
	}
	if census != g.last {
		g.last, g.suspect = census, false
		clear(g.handed)
	}
	if surplus <= 0 {
		g.suspect = false
		return true, nil
	}
	keep := g.asked[:0]
	for _, at := range g.asked {
		if now.Sub(at) < guardWindow {
			keep = append(keep, at)
		}
	}
	g.asked = keep
	part := -1
	for _, i := range held {
		if h := g.handed[i]; !h.at.IsZero() && now.Sub(h.at) < backWithin && h.census == census {
			part = i
			break
		}
	}
	switch {
	case part >= 0 && !g.suspect:
		g.suspect = true
		return false, nil
	case part < 0:
		g.suspect = false
		if len(g.asked)+surplus <= budgetPer*len(b.parts) {
			return true, nil
		}
	}
	if g.pause == 0 || g.census != census {
		g.pause = pauseFirst
	} else {
		g.pause = min(2*g.pause, pauseMax)
	}
	g.until, g.census, g.suspect = now.Add(g.pause), census, false
	clear(g.handed)
	return false, &HandoverPause{Part: part, Census: census, For: g.pause}
}

// Handover asks a partition's receiver to give its partition queue to
// another replica: it stops taking deliveries, waits until every one it took
// is settled, then detaches and attaches again, behind the consumers
// waiting on the queue.
type Handover struct{}
