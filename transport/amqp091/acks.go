package amqp091

import (
	"context"
	"sync"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/amqpactor/amqpactor/messages"
)

// maxDoneGap bounds how many settled delivery tags the acker remembers past
// one that is still unsettled; beyond it it stops coalescing and sends
// every acknowledgement on its own, which needs no memory.
const maxDoneGap = 1 << 16

// acker sends a consumer's acknowledgements, several at a time where it
// can: one basic.ack with multiple=true for a run of delivery tags that are
// all settled. Each basic.ack is a command to a quorum queue, and RabbitMQ
// 4.0 can lose the last of them when a channel closes right after (their
// messages come back), the more so the more are in flight; fewer, larger
// acknowledgements leave less to lose and cost the broker less.
//
// Acknowledgements are handed to a goroutine of its own (run), so that
// those the settler produces while one is being written go out together.
// A multiple acknowledgement only ever covers tags that are settled
// (acknowledged or negatively acknowledged already): a message still
// being handled, or held back for the channel's close, stops the run.
type acker struct {
	send func(tag uint64, multiple bool) error
	ch   *chanAcks

	mu      sync.Mutex
	pending []uint64        // acknowledged by the runtime, not sent yet
	counted map[uint64]bool // modified while the receiver stopped: given back counted
	wake    chan struct{}
	done    chan struct{} // closed by stop

	// Guarded by ch's lock, which orders every frame sent about the
	// channel's deliveries:
	next    uint64 // the lowest tag not known settled (tags start at 1)
	settled map[uint64]bool
	single  bool // too many settled past a gap: no more coalescing
}

// chanAcks orders what is sent about one channel's deliveries: its
// consumers' acknowledgements and a transaction that settles some of them
// (Receiver.commitTx). Once a transaction has run on the channel it is in
// tx.select mode for good, where an acknowledgement only takes effect at
// tx.commit, so every later batch of them is committed too.
type chanAcks struct {
	sync.Mutex
	tx     bool         // the channel is in tx.select mode
	commit func() error // tx.commit, bounded
}

// do runs f, which sends acknowledgements, in order with the others, and
// commits them when the channel is transactional.
func (c *chanAcks) do(f func() error) error {
	c.Lock()
	defer c.Unlock()
	return c.doLocked(f)
}

func (c *chanAcks) doLocked(f func() error) error {
	err := f()
	if c.tx {
		if cerr := c.commit(); err == nil {
			err = cerr
		}
	}
	return err
}

// newChanAcks orders the acknowledgements sent on s's channel.
func newChanAcks(s *Session) *chanAcks {
	return &chanAcks{commit: func() error {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultDialTimeout)
		defer cancel()
		return s.call(ctx, s.ch.TxCommit)
	}}
}

func newAcker(ch *chanAcks, send func(tag uint64, multiple bool) error) *acker {
	return &acker{send: send, ch: ch, next: 1, settled: map[uint64]bool{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// ack queues the acknowledgement of tag.
func (a *acker) ack(tag uint64) {
	a.mu.Lock()
	a.pending = append(a.pending, tag)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// settleFrame sends what settles tag with a negative outcome o. Modified
// goes back with basic.reject and requeue, which RabbitMQ counts in
// x-delivery-count on every release; released with basic.nack and requeue,
// which RabbitMQ 4.3 no longer counts (4.0 counts every return, either
// way). Rejected and modified{undeliverable-here} are not requeued.
func settleFrame(ch *rmq.Channel, tag uint64, o messages.Outcome) error {
	switch {
	case o.Kind == messages.Modified && !o.UndeliverableHere:
		return ch.Reject(tag, true)
	case o.Kind == messages.Released:
		return ch.Nack(tag, false, true)
	default:
		return ch.Nack(tag, false, false)
	}
}

// holdBack notes that tag, settled with o after the receiver stopped
// taking deliveries, is to be given back by its Close (giveBackFrame).
func (a *acker) holdBack(tag uint64, o messages.Outcome) {
	if a == nil || o.Kind != messages.Modified {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.counted == nil {
		a.counted = map[uint64]bool{}
	}
	a.counted[tag] = true
}

// giveBackFrame returns tag to its queue as the receiver's Close gives it
// back: counted if it was modified (holdBack), as released otherwise (it
// was never settled, or released).
func (a *acker) giveBackFrame(ch *rmq.Channel, tag uint64) error {
	o := messages.Outcome{Kind: messages.Released}
	if a != nil {
		a.mu.Lock()
		if a.counted[tag] {
			o.Kind = messages.Modified
			delete(a.counted, tag)
		}
		a.mu.Unlock()
	}
	return settleFrame(ch, tag, o)
}

// nack sends a negative acknowledgement of tag now (through f), in order
// with the acknowledgements sent before it, and counts tag as settled.
func (a *acker) nack(tag uint64, f func() error) error {
	a.ch.Lock()
	defer a.ch.Unlock()
	if err := a.ch.doLocked(f); err != nil {
		return err
	}
	a.markLocked(tag)
	a.advanceLocked()
	return nil
}

// settledLocked counts tags as settled by something else (a transaction),
// so that no multiple acknowledgement covers them again. a.ch is locked.
func (a *acker) settledLocked(tags []uint64) {
	for _, t := range tags {
		a.markLocked(t)
	}
	a.advanceLocked()
}

// run sends what is queued until stop, or until gone is closed (the
// channel has ended).
func (a *acker) run(gone <-chan struct{}) {
	for {
		select {
		case <-a.wake:
			_ = a.flush()
		case <-a.done:
			return
		case <-gone:
			return
		}
	}
}

// stop ends run; what is still queued is for flush.
func (a *acker) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.done:
	default:
		close(a.done)
	}
}

// flush sends every queued acknowledgement: one multiple acknowledgement
// for those that extend the run of settled tags from next, one each for
// the others. The first error is returned (the channel has ended).
func (a *acker) flush() error {
	a.ch.Lock()
	defer a.ch.Unlock()
	return a.flushLocked()
}

func (a *acker) flushLocked() error {
	a.mu.Lock()
	tags := a.pending
	a.pending = nil
	a.mu.Unlock()
	if len(tags) == 0 {
		return nil
	}
	return a.ch.doLocked(func() error { return a.sendLocked(tags) })
}

// sendLocked sends the acknowledgements of tags; see flush.
func (a *acker) sendLocked(tags []uint64) error {
	var first error
	sendOne := func(tag uint64, multiple bool) {
		if err := a.send(tag, multiple); err != nil && first == nil {
			first = err
		}
	}
	if a.single {
		for _, t := range tags {
			sendOne(t, false)
		}
		return first
	}
	inRun := map[uint64]bool{}
	for _, t := range tags {
		inRun[t] = true
		a.settled[t] = true
	}
	// The run of settled tags from next: those of tags in it go out as one
	// acknowledgement up to the highest of them, which is unacknowledged
	// on the broker until this very frame.
	var upTo uint64
	for a.settled[a.next] {
		if inRun[a.next] {
			upTo = a.next
			delete(inRun, a.next)
		}
		delete(a.settled, a.next)
		a.next++
	}
	if upTo > 0 {
		sendOne(upTo, true)
	}
	for _, t := range tags {
		if inRun[t] {
			// Past a gap: on its own, and remembered as settled until the
			// run reaches it.
			sendOne(t, false)
		}
	}
	if len(a.settled) > maxDoneGap {
		a.single, a.settled = true, nil
	}
	return first
}

func (a *acker) markLocked(tag uint64) {
	if !a.single && tag >= a.next {
		a.settled[tag] = true
	}
}

func (a *acker) advanceLocked() {
	if a.single {
		return
	}
	for a.settled[a.next] {
		delete(a.settled, a.next)
		a.next++
	}
	if len(a.settled) > maxDoneGap {
		a.single, a.settled = true, nil
	}
}
