// Package coalesce is the write coalescer both transports put under their
// socket: their AMQP clients write every frame with its own system call,
// and under load the frames of a burst share one instead. A transport whose
// frames can be merged (AMQP 1.0 dispositions, in amqpwire) passes a Folder
// that does it.
package coalesce

import (
	"net"
	"os"
	"runtime"
	"sync"
	"time"
)

// go-amqp and amqp091-go write every frame with its own write system call,
// from one goroutine, and wait for it. Under load that is one system call
// per transfer and one per disposition or acknowledgement, on both sides of
// the wire: the largest single cost of a client on loopback or a fast
// network. Conn lets the client's writer hand frames over without waiting
// for the socket: a
// flusher goroutine writes whatever has piled up since its last write in one
// system call. When the connection is idle a frame goes out as soon as the
// flusher wakes, so latency barely moves; under load the frames of a burst
// (the dispositions of a batch of deliveries, the transfers released by a
// batch of confirms) share a write.
//
// Ordering is that of the Write calls, except what a Folder changes (on
// AMQP 1.0 a session's dispositions folded into ranges, one that may still
// grow held back for at most holdFor). At-least-once does not depend on a
// write having reached the socket: a frame counts once the peer's
// disposition says so, whichever way it was written.
type Conn struct {
	net.Conn

	wake  chan struct{} // cap 1: bytes are pending
	space chan struct{} // cap 1: the flusher took the pending bytes
	done  chan struct{} // the flusher has returned

	mu       sync.Mutex
	buf      []byte // pending bytes, in Write order
	folder   Folder // nil: bytes go out as written
	folded   uint64 // frames folded into an earlier one, for the tests
	spare    []byte // the flusher's buffer, reused
	err      error  // sticky: the first write error, or net.ErrClosed
	closing  bool
	deadline time.Time // the write deadline the user set, for a Write that must wait
	closed   sync.Once

	// holdFor bounds how long the folder may hold frames back; 0 holds
	// nothing. holdSince is when the frames held now began to be held,
	// zero when none is.
	holdFor   time.Duration
	holdSince time.Time
	expired   uint64 // holds ended because holdFor had passed, for the tests

	closeFlush time.Duration // closeFlushTimeout; shorter in the tests
}

const (
	// maxPending bounds the bytes waiting for the flusher; a Write that
	// would exceed it waits (up to its write deadline), which is how a slow
	// peer pushes back, as a full socket buffer does without coalescing.
	maxPending = 1 << 20
	// flushTimeout bounds one write to the socket; go-amqp's own default
	// write timeout is the same 30 s.
	flushTimeout = 30 * time.Second
)

// closeFlushTimeout bounds how long Close waits for pending bytes (the close
// performative among them) to reach the socket.
const closeFlushTimeout = 2 * time.Second

// Folder merges frames as they are queued, for a protocol whose frames
// can say together what they say apart. Its methods run under the
// coalescer's lock, one at a time.
type Folder interface {
	// Fold queues p, one whole frame as the client wrote it, into the
	// pending bytes buf when it can be folded into a frame there: it
	// returns buf (possibly moved) and true. Otherwise it returns buf as
	// it was and false, having noted what p means for later folds, and
	// the coalescer appends p.
	Fold(buf, p []byte) ([]byte, bool)
	// Take splits the pending bytes buf for one flush: out is written now,
	// next becomes the pending bytes, starting with what is held back
	// (holding says whether anything is). Unless release is set, frames
	// that may still grow may be held. out and next are the storage of buf
	// and spare, the flusher's buffer of the previous flush, between them.
	Take(buf, spare []byte, release bool) (out, next []byte, holding bool)
}

// New wraps c so that frames written while a write is under way go out
// together in the next one. folder, when not nil, folds frames as they are
// queued and may hold frames back for at most holdFor.
func New(c net.Conn, folder Folder, holdFor time.Duration) *Conn {
	cc := &Conn{
		Conn:       c,
		folder:     folder,
		holdFor:    holdFor,
		closeFlush: closeFlushTimeout,
		wake:       make(chan struct{}, 1),
		space:      make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
	if folder == nil {
		cc.holdFor = 0
	}
	go cc.flush()
	return cc
}

// Folded is how many frames the folder has folded into an earlier one,
// for the tests.
func (c *Conn) Folded() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.folded
}

// ExpiredHolds is how many times the flusher wrote frames held back
// because their hold ran out, for the tests.
func (c *Conn) ExpiredHolds() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.expired
}

// poke wakes the flusher, unless it has been woken already: wake holds
// one signal at most.
func (c *Conn) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Write queues p for the flusher and returns; it waits only when maxPending
// bytes are already queued.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	for c.err == nil && len(c.buf) > 0 && len(c.buf)+len(p) > maxPending {
		deadline := c.deadline
		c.mu.Unlock()
		if !c.waitSpace(deadline) {
			return 0, os.ErrDeadlineExceeded
		}
		c.mu.Lock()
	}
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, err
	}
	added := c.appendFrame(p)
	c.mu.Unlock()
	if added {
		c.poke()
	}
	return len(p), nil
}

// appendFrame queues p, folding it into an earlier frame where the folder
// can, and reports whether it added a frame. A folded p needs no wake-up:
// the frame it joined is still pending, so a wake-up for it is pending too,
// or it is held and the flusher's timer writes it.
func (c *Conn) appendFrame(p []byte) bool {
	if c.folder != nil {
		buf, folded := c.folder.Fold(c.buf, p)
		c.buf = buf
		if folded {
			c.folded++
			return false
		}
	}
	c.buf = append(c.buf, p...)
	return true
}

// take hands the flusher what to write of the pending bytes, under c.mu;
// holding says that the folder kept frames back.
func (c *Conn) take(release bool) (out []byte, holding bool) {
	if c.folder == nil {
		out = c.buf
		c.buf, c.spare = c.spare[:0], out
		return out, false
	}
	out, c.buf, holding = c.folder.Take(c.buf, c.spare, release)
	c.spare = out
	return out, holding
}

func (c *Conn) waitSpace(deadline time.Time) bool {
	if deadline.IsZero() {
		select {
		case <-c.space:
		case <-c.done:
		}
		return true
	}
	d := time.Until(deadline)
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.space:
		return true
	case <-c.done:
		return true // c.err is set: the caller sees it
	case <-t.C:
		return false
	}
}

// flush runs until Close or the first write error. Its timer ends the
// holding of frames holdFor after it began.
func (c *Conn) flush() {
	defer close(c.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	armed := false
	for {
		select {
		case <-c.wake:
			// Let the goroutines that produce frames run once more before
			// the system call, so that a burst already under way joins
			// this write.
			runtime.Gosched()
		case <-timer.C:
			armed = false
		}
		for {
			c.mu.Lock()
			if c.err != nil {
				c.mu.Unlock()
				return
			}
			release := c.releaseHeld()
			if release && !c.closing && !c.holdSince.IsZero() {
				c.expired++
			}
			out, holding := c.take(release)
			if !holding {
				c.holdSince = time.Time{}
			} else if c.holdSince.IsZero() {
				c.holdSince = time.Now()
			}
			until := c.holdSince.Add(c.holdFor)
			if len(out) == 0 && c.closing {
				c.err = net.ErrClosed
			}
			stop := c.err != nil
			c.mu.Unlock()
			if holding && !armed {
				timer.Reset(time.Until(until))
				armed = true
			}
			if len(out) == 0 {
				if stop {
					return
				}
				break
			}
			c.signalSpace()

			_ = c.Conn.SetWriteDeadline(time.Now().Add(flushTimeout))
			if _, err := c.Conn.Write(out); err != nil {
				c.mu.Lock()
				if c.err == nil {
					c.err = err
				}
				c.mu.Unlock()
				c.signalSpace()
				return
			}
		}
	}
}

// releaseHeld reports, under c.mu, whether this flush writes the held
// frames too: on Close, and once holdFor has passed.
func (c *Conn) releaseHeld() bool {
	return c.closing || c.holdFor <= 0 ||
		(!c.holdSince.IsZero() && time.Since(c.holdSince) >= c.holdFor)
}

func (c *Conn) signalSpace() {
	select {
	case c.space <- struct{}{}:
	default:
	}
}

// Close writes what is pending (for at most closeFlushTimeout: the client's
// close frame is usually among it) and closes the connection.
func (c *Conn) Close() error {
	err := net.ErrClosed
	c.closed.Do(func() {
		c.mu.Lock()
		c.closing = true
		c.mu.Unlock()
		c.poke()
		t := time.NewTimer(c.closeFlush)
		select {
		case <-c.done:
		case <-t.C:
		}
		t.Stop()
		err = c.Conn.Close()
		<-c.done // the close ends any write still under way
		c.mu.Lock()
		if c.err == nil {
			c.err = net.ErrClosed
		}
		c.mu.Unlock()
		c.signalSpace()
	})
	return err
}

// SetWriteDeadline bounds a Write that has to wait for the flusher; the
// socket's own writes are bounded by flushTimeout instead, because a
// deadline set for one frame would otherwise expire under a later one.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return nil
}

func (c *Conn) SetDeadline(t time.Time) error {
	_ = c.SetWriteDeadline(t)
	return c.Conn.SetReadDeadline(t)
}
