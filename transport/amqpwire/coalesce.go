package amqpwire

import (
	"net"
	"os"
	"runtime"
	"sync"
	"time"
)

// go-amqp writes every frame with its own write system call, from one
// goroutine, and waits for it. Under load that is one system call per
// transfer and one per disposition, on both sides of the wire: the largest
// single cost of a client on loopback or a fast network. coalescingConn lets
// go-amqp's writer hand frames over without waiting for the socket: a
// flusher goroutine writes whatever has piled up since its last write in one
// system call. When the connection is idle a frame goes out as soon as the
// flusher wakes, so latency barely moves; under load the frames of a burst
// (the dispositions of a batch of deliveries, the transfers released by a
// batch of confirms) share a write.
//
// Ordering is that of the Write calls, except that the writer folds a
// session's dispositions into ranges and holds back one that may still
// grow for at most holdFor (dispmerge.go). At-least-once does not depend on a
// write having reached the socket: a frame counts once the peer's
// disposition says so, whichever way it was written.
type coalescingConn struct {
	net.Conn

	wake  chan struct{} // cap 1: bytes are pending
	space chan struct{} // cap 1: the flusher took the pending bytes
	done  chan struct{} // the flusher has returned

	mu       sync.Mutex
	buf      []byte // pending bytes, in Write order
	folds    folds  // the dispositions in buf later ones may fold into (dispmerge.go)
	folded   uint64 // dispositions folded into an earlier one, for the tests
	fold     bool   // the stream is go-amqp's, one AMQP 1.0 frame per Write: fold dispositions
	spare    []byte // the flusher's buffer, reused
	err      error  // sticky: the first write error, or net.ErrClosed
	closing  bool
	deadline time.Time // the write deadline the user set, for a Write that must wait
	closed   sync.Once

	// holdFor bounds how long a disposition that may still grow is held
	// back (dispmerge.go); 0 holds nothing. holdSince is when the
	// dispositions held now began to be held, zero when none is.
	holdFor   time.Duration
	holdSince time.Time
	expired   uint64 // holds ended because holdFor had passed, for the tests
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

// dispositionHold is how long the writer of a go-amqp connection holds back
// a disposition that may still grow (holdFor). A millisecond is tens of
// deliveries under load and nothing a person or a timeout notices; the
// settlement of a delivery is not awaited by anyone once written.
var dispositionHold = time.Millisecond

// closeFlushTimeout bounds how long Close waits for pending bytes (the close
// performative among them) to reach the socket. A variable for the tests.
var closeFlushTimeout = 2 * time.Second

func coalesce(c net.Conn, fold bool) *coalescingConn {
	cc := &coalescingConn{
		Conn:  c,
		fold:  fold,
		wake:  make(chan struct{}, 1),
		space: make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	if fold {
		cc.holdFor = dispositionHold
	}
	go cc.flush()
	return cc
}

// Write queues p for the flusher and returns; it waits only when maxPending
// bytes are already queued.
func (c *coalescingConn) Write(p []byte) (int, error) {
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
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// appendFrame queues p, folding a disposition into an earlier one of its
// session where that means the same (dispmerge.go), and reports whether it
// added a frame. go-amqp writes one frame per Write, so p is a whole frame
// or something that is not folded. A folded p needs no wake-up: the frame
// it joined is still pending, so a wake-up for it is pending too, or it is
// held and the flusher's timer writes it.
func (c *coalescingConn) appendFrame(p []byte) bool {
	if c.fold && c.foldInto(p) {
		c.folded++
		return false
	}
	c.buf = append(c.buf, p...)
	return true
}

func (c *coalescingConn) waitSpace(deadline time.Time) bool {
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
// holding of dispositions (dispmerge.go) holdFor after it began.
func (c *coalescingConn) flush() {
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
// dispositions too: on Close, and once holdFor has passed.
func (c *coalescingConn) releaseHeld() bool {
	return c.closing || c.holdFor <= 0 ||
		(!c.holdSince.IsZero() && time.Since(c.holdSince) >= c.holdFor)
}

func (c *coalescingConn) signalSpace() {
	select {
	case c.space <- struct{}{}:
	default:
	}
}

// Close writes what is pending (for at most closeFlushTimeout: go-amqp's
// close performative is usually among it) and closes the connection.
func (c *coalescingConn) Close() error {
	err := net.ErrClosed
	c.closed.Do(func() {
		c.mu.Lock()
		c.closing = true
		c.mu.Unlock()
		select {
		case c.wake <- struct{}{}:
		default:
		}
		t := time.NewTimer(closeFlushTimeout)
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
func (c *coalescingConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return nil
}

func (c *coalescingConn) SetDeadline(t time.Time) error {
	_ = c.SetWriteDeadline(t)
	return c.Conn.SetReadDeadline(t)
}
