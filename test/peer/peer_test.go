package peer_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// broker is a scripted AMQP 1.0 peer on a loopback TCP socket: enough of a
// broker for go-amqp to authenticate (SASL ANONYMOUS), open, begin sessions
// and attach links, and for the App to publish and subscribe. What it does
// at each step is the test's (script); the defaults answer at once.
type broker struct {
	t        *testing.T
	ln       net.Listener
	script   script
	accepted atomic.Int64
	closes   chan closeSeen // the close each connection received, in order
	quit     chan struct{}  // closed when the test ends: late answers are dropped
	wg       sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

// script says what the peer does; each hook runs on the connection's
// reading goroutine, and a nil hook answers at once.
type script struct {
	// open answers the client's open (c.answerOpen).
	open func(c *peerConn)
	// begin answers a begin on channel ch (c.answerBegin).
	begin func(c *peerConn, ch uint16)
	// attach answers an attach (c.answerAttach).
	attach func(c *peerConn, ch uint16, a attach)
	// transfer answers a delivery the client sent (c.settle).
	transfer func(c *peerConn, ch uint16, id uint32)
	// flow sees a flow the client sent (body from its descriptor) after
	// the peer answered a drain in it (c.answerDrain).
	flow func(c *peerConn, ch uint16, body []byte)
	// disposition sees a disposition the client sent (body from its
	// descriptor).
	disposition func(c *peerConn, ch uint16, body []byte)
	// detach answers a detach of the link with handle h (c.answerDetach).
	detach func(c *peerConn, ch uint16, h []byte)
	// end sees the client's end of the session on channel ch (body from
	// its descriptor, with the error the client gave, if any); the peer
	// then answers it.
	end func(c *peerConn, ch uint16, body []byte)
}

// closeSeen is the body of the close a connection received.
type closeSeen struct {
	conn int64 // 1 for the first connection accepted
	body []byte
}

func newBroker(t *testing.T, s script) *broker {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	b := &broker{t: t, ln: ln, script: s, closes: make(chan closeSeen, 64), quit: make(chan struct{})}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.close)
	return b
}

// url is the broker's URL: no userinfo, so go-amqp offers SASL ANONYMOUS.
func (b *broker) url() string { return "amqp://" + b.ln.Addr().String() + "/" }

func (b *broker) accept() {
	defer b.wg.Done()
	for {
		nc, err := b.ln.Accept()
		if err != nil {
			return
		}
		n := b.accepted.Add(1)
		b.mu.Lock()
		b.conns = append(b.conns, nc)
		b.mu.Unlock()
		c := &peerConn{b: b, n: n, nc: nc}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer nc.Close()
			if err := c.serve(); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				b.t.Logf("peer connection %d: %v", n, err)
			}
		}()
	}
}

func (b *broker) close() {
	close(b.quit)
	_ = b.ln.Close()
	b.mu.Lock()
	for _, c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// peerConn is one accepted connection.
type peerConn struct {
	b  *broker
	n  int64
	nc net.Conn
	mu sync.Mutex // orders writes: a hook may answer from another goroutine

	ended map[uint16]bool // sessions the peer ended itself (endWith), under mu
}

// endWith ends the session on ch from the peer's side, with the described
// error e: its answer to the client's end, which follows, is no second end.
func (c *peerConn) endWith(ch uint16, e []byte) {
	c.mu.Lock()
	if c.ended == nil {
		c.ended = map[uint16]bool{}
	}
	c.ended[ch] = true
	c.mu.Unlock()
	c.write(frame(0, ch, performative(0x17, e)))
}

func (c *peerConn) write(frames ...[]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range frames {
		if _, err := c.nc.Write(f); err != nil {
			return // the client has gone; its side of the test says so
		}
	}
}

// later runs f after d on its own goroutine, which the broker's cleanup
// waits for: a peer that answers late.
func (c *peerConn) later(d time.Duration, f func()) {
	c.b.wg.Add(1)
	timer := time.NewTimer(d)
	go func() {
		defer c.b.wg.Done()
		defer timer.Stop()
		select {
		case <-timer.C:
			f()
		case <-c.b.quit:
		}
	}()
}

// readFrame reads one frame: its type, channel and body (nil for a
// heartbeat).
func (c *peerConn) readFrame() (typ byte, ch uint16, body []byte, err error) {
	var h [8]byte
	if _, err = io.ReadFull(c.nc, h[:]); err != nil {
		return 0, 0, nil, err
	}
	size := binary.BigEndian.Uint32(h[:])
	if size < 8 || size > 1<<20 {
		return 0, 0, nil, fmt.Errorf("frame size %d", size)
	}
	body = make([]byte, size-8)
	if _, err = io.ReadFull(c.nc, body); err != nil {
		return 0, 0, nil, err
	}
	doff := int(h[4]) * 4
	if doff > 8 {
		body = body[doff-8:]
	}
	return h[5], binary.BigEndian.Uint16(h[6:]), body, nil
}

func (c *peerConn) expectHeader(want []byte) error {
	var h [8]byte
	if _, err := io.ReadFull(c.nc, h[:]); err != nil {
		return err
	}
	if !bytes.Equal(h[:], want) {
		return fmt.Errorf("protocol header % x, want % x", h, want)
	}
	return nil
}

var (
	saslHeader = []byte{'A', 'M', 'Q', 'P', 3, 1, 0, 0}
	amqpHeader = []byte{'A', 'M', 'Q', 'P', 0, 1, 0, 0}
)

func (c *peerConn) serve() error {
	if err := c.expectHeader(saslHeader); err != nil {
		return err
	}
	mechs := []byte{0xe0, 0, 1, 0xa3, 9}
	mechs = append(mechs, "ANONYMOUS"...)
	mechs[1] = byte(len(mechs) - 2)
	c.write(saslHeader, frame(1, 0, performative(0x40, mechs)))
	if _, _, _, err := c.readFrame(); err != nil { // sasl-init
		return err
	}
	c.write(frame(1, 0, performative(0x44, []byte{0x50, 0})))
	if err := c.expectHeader(amqpHeader); err != nil {
		return err
	}
	c.write(amqpHeader)
	for {
		typ, ch, body, err := c.readFrame()
		if err != nil {
			return err
		}
		if typ != 0 || len(body) < 3 {
			continue // a heartbeat
		}
		switch body[2] {
		case 0x10:
			if h := c.b.script.open; h != nil {
				h(c)
			} else {
				c.answerOpen()
			}
		case 0x11:
			if h := c.b.script.begin; h != nil {
				h(c, ch)
			} else {
				c.answerBegin(ch)
			}
		case 0x12:
			a, err := parseAttach(body)
			if err != nil {
				return err
			}
			if h := c.b.script.attach; h != nil {
				h(c, ch, a)
			} else {
				c.answerAttach(ch, a)
			}
		case 0x13:
			c.answerDrain(ch, body)
			if h := c.b.script.flow; h != nil {
				h(c, ch, body)
			}
		case 0x14:
			id, ok := deliveryID(body)
			if !ok {
				continue // a continuation frame
			}
			if h := c.b.script.transfer; h != nil {
				h(c, ch, id)
			} else {
				c.settle(ch, id, id)
			}
		case 0x15:
			if h := c.b.script.disposition; h != nil {
				h(c, ch, body)
			}
		case 0x16:
			h := fields(body)[0]
			if d := c.b.script.detach; d != nil {
				d(c, ch, h)
			} else {
				c.answerDetach(ch, h)
			}
		case 0x17:
			if h := c.b.script.end; h != nil {
				h(c, ch, body)
			}
			c.mu.Lock()
			answered := c.ended[ch]
			delete(c.ended, ch)
			c.mu.Unlock()
			if !answered {
				c.write(frame(0, ch, performative(0x17)))
			}
		case 0x18:
			c.b.closes <- closeSeen{conn: c.n, body: body}
			c.write(frame(0, 0, performative(0x18)))
			_, _ = io.Copy(io.Discard, c.nc)
			return nil
		}
	}
}

func (c *peerConn) answerOpen() {
	c.write(frame(0, 0, performative(0x10, encStr("scripted"), encStr("localhost"), encUint(65536), []byte{0x60, 0, 255})))
}

func (c *peerConn) answerBegin(ch uint16) {
	c.write(frame(0, ch, performative(0x11, []byte{0x60, byte(ch >> 8), byte(ch)}, encUint(0), encUint(5000), encUint(5000))))
}

func (c *peerConn) answerDetach(ch uint16, handle []byte) {
	c.write(frame(0, ch, performative(0x16, handle, encBool(true))))
}

// answerAttach attaches the other end of a, and grants a sender credit.
func (c *peerConn) answerAttach(ch uint16, a attach) {
	terminus := func(code byte) []byte { return performative(code, encStr("q")) }
	c.write(frame(0, ch, performative(0x12, encStr(a.name), encUint(a.handle), encBool(!a.receiver), a.sndSettle, a.rcvSettle,
		terminus(0x28), terminus(0x29), null, null, encUint(0))))
	if !a.receiver {
		c.write(frame(0, ch, performative(0x13, encUint(0), encUint(5000), encUint(0), encUint(5000),
			encUint(a.handle), encUint(0), encUint(1000))))
	}
}

// answerDrain answers a receiver's drain as a broker with nothing to send
// does: the credit is used up at once.
func (c *peerConn) answerDrain(ch uint16, body []byte) {
	f := fields(body)
	if len(f) < 9 || f[8][0] != 0x41 {
		return
	}
	dc, ok1 := uintValue(f[5])
	credit, ok2 := uintValue(f[6])
	if !ok1 || !ok2 {
		return
	}
	c.write(frame(0, ch, performative(0x13, encUint(0), encUint(5000), encUint(0), encUint(5000),
		f[4], encUint(dc+credit), encUint(0), null, encBool(true))))
}

// settle accepts and settles the deliveries first..last the client sent.
func (c *peerConn) settle(ch uint16, first, last uint32) {
	accepted := []byte{0x00, 0x53, 0x24, 0x45}
	c.write(frame(0, ch, performative(0x15, encBool(true), encUint(first), encUint(last), encBool(true), accepted)))
}

// attach is what the peer needs of an attach.
type attach struct {
	name     string
	handle   uint32
	receiver bool // the client's role
	// The settlement modes the client asked for, encoded: the peer
	// agrees to them.
	sndSettle, rcvSettle []byte
	// source is the encoded source terminus, nil when absent.
	source []byte
}

func parseAttach(body []byte) (attach, error) {
	f := fields(body)
	if len(f) < 3 {
		return attach{}, errors.New("attach with fewer than 3 fields")
	}
	var a attach
	switch n := f[0]; n[0] {
	case 0xa1:
		a.name = string(n[2:])
	case 0xb1:
		a.name = string(n[5:])
	default:
		return a, fmt.Errorf("attach name with constructor 0x%02x", n[0])
	}
	h, ok := uintValue(f[1])
	if !ok {
		return a, errors.New("attach without a handle")
	}
	a.handle = h
	a.receiver = f[2][0] == 0x41 || (f[2][0] == 0x56 && f[2][1] == 1)
	a.sndSettle, a.rcvSettle = null, null
	if len(f) > 3 {
		a.sndSettle = f[3]
	}
	if len(f) > 4 {
		a.rcvSettle = f[4]
	}
	if len(f) > 5 && f[5][0] == 0x00 {
		a.source = f[5]
	}
	return a, nil
}

// deliveryID is a transfer's delivery-id, absent on continuation frames.
func deliveryID(body []byte) (uint32, bool) {
	f := fields(body)
	if len(f) < 2 {
		return 0, false
	}
	return uintValue(f[1])
}

func uintValue(v []byte) (uint32, bool) {
	switch v[0] {
	case 0x43:
		return 0, true
	case 0x52:
		return uint32(v[1]), true
	case 0x70:
		return binary.BigEndian.Uint32(v[1:]), true
	}
	return 0, false
}

// fields splits a performative's list (body from its descriptor) into its
// encoded fields. A transfer's payload after the list is left out.
func fields(body []byte) [][]byte {
	b := body[3:]
	var pos, end, count int
	switch b[0] {
	case 0x45:
		return nil
	case 0xc0:
		end, count, pos = 2+int(b[1]), int(b[2]), 3
	case 0xd0:
		end, count, pos = 5+int(binary.BigEndian.Uint32(b[1:])), int(binary.BigEndian.Uint32(b[5:])), 9
	default:
		return nil
	}
	b = b[:end]
	var out [][]byte
	for i := 0; i < count && pos < len(b); i++ {
		next := skip(b, pos)
		if next < 0 {
			break
		}
		out = append(out, b[pos:next])
		pos = next
	}
	return out
}

// skip returns where the value at b[pos:] ends, -1 when it cannot tell.
func skip(b []byte, pos int) int {
	if pos >= len(b) {
		return -1
	}
	code := b[pos]
	pos++
	var n int
	switch {
	case code == 0x00:
		if pos = skip(b, pos); pos < 0 {
			return -1
		}
		return skip(b, pos)
	case code >= 0x40 && code <= 0x45:
	case code >= 0x50 && code <= 0x56:
		n = 1
	case code == 0x60 || code == 0x61:
		n = 2
	case code >= 0x70 && code <= 0x74:
		n = 4
	case code >= 0x80 && code <= 0x84:
		n = 8
	case code == 0x98:
		n = 16
	case code == 0xa0 || code == 0xa1 || code == 0xa3 || code == 0xc0 || code == 0xc1 || code == 0xe0:
		if pos >= len(b) {
			return -1
		}
		n = 1 + int(b[pos])
	case code == 0xb0 || code == 0xb1 || code == 0xb3 || code == 0xd0 || code == 0xd1 || code == 0xf0:
		if pos+4 > len(b) {
			return -1
		}
		n = 4 + int(binary.BigEndian.Uint32(b[pos:]))
	default:
		return -1
	}
	if pos+n > len(b) {
		return -1
	}
	return pos + n
}

// The encoder of what the peer sends.

func frame(typ byte, ch uint16, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
	b = append(b, 2, typ)
	b = binary.BigEndian.AppendUint16(b, ch)
	return append(b, body...)
}

func performative(code byte, fields ...[]byte) []byte {
	content := bytes.Join(fields, nil)
	b := []byte{0x00, 0x53, code}
	if len(content)+1 < 256 {
		b = append(b, 0xc0, byte(len(content)+1), byte(len(fields)))
	} else {
		b = append(b, 0xd0)
		b = binary.BigEndian.AppendUint32(b, uint32(len(content)+4))
		b = binary.BigEndian.AppendUint32(b, uint32(len(fields)))
	}
	return append(b, content...)
}

func encUint(v uint32) []byte {
	switch {
	case v == 0:
		return []byte{0x43}
	case v < 256:
		return []byte{0x52, byte(v)}
	}
	return binary.BigEndian.AppendUint32([]byte{0x70}, v)
}

func encBool(v bool) []byte {
	if v {
		return []byte{0x41}
	}
	return []byte{0x42}
}

func encStr(s string) []byte {
	if len(s) < 256 {
		return append([]byte{0xa1, byte(len(s))}, s...)
	}
	return append(binary.BigEndian.AppendUint32([]byte{0xb1}, uint32(len(s))), s...)
}

var null = []byte{0x40}
