package amqpwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/amqpactor/amqpactor/internal/amqpscan"
	"github.com/amqpactor/amqpactor/transport"
)

// The inbound guard sits between the socket (or TLS) and go-amqp's reader:
// go-amqp reads the connection through it. It follows the frame stream after
// the protocol headers and checks the payload of every delivery with the
// payload scanner before go-amqp can decode it, because go-amqp decodes a
// message in its own reader goroutine, where a panic (a footer with a list
// key: hash of unhashable type) or a stack overflow (a million nested maps)
// ends the process, and a decode error ends the link, which hands every
// message in flight back to the broker with its delivery-count raised.
//
// What the guard changes, and only that:
//
//   - A single-frame transfer whose payload passes goes through as it came,
//     without a copy beyond the one into go-amqp's buffer.
//   - A multi-frame transfer: every frame but the last goes on at once, with
//     its performative unchanged and its payload taken out (the frame's size
//     rewritten); the payload is kept until the last frame, which then carries
//     the whole payload when it passes. go-amqp reassembles a delivery from
//     its frames' payloads, so it sees the same message; it counts transfer
//     frames for session flow, and it sees every frame the peer sent, in the
//     peer's order and at the time it came. Nothing is held back, so frames
//     of other links and sessions, flows, dispositions and detaches keep
//     their order, and the session window never waits on the guard.
//   - A payload that fails the check, or a delivery larger than the max
//     message size, arrives as a poison message (transport.PoisonAnnotation):
//     the same frames, the last one carrying a small message that says why
//     instead of the payload. Past the max message size nothing more of that
//     delivery is kept.
//   - An aborted delivery: the kept payload is dropped and the aborting frame
//     goes on as it came; go-amqp discards the delivery.
//   - Every other performative is walked whole (it is at most a frame) and
//     refused when a map in it has a key go-amqp would panic on (a list,
//     map, array, binary or described key where go-amqp builds a Go map of
//     interface keys: a modified state's annotations, a map among
//     properties or error info), or when it is a disposition whose range
//     go-amqp would walk for ever or for long (dispositionHonest).
//   - After a refusal, the close go-amqp writes goes out carrying
//     amqp:connection:framing-error and the reason (Write).
//
// Frames are bounded by the max frame size go-amqp announces
// (guardMaxFrameSize): a larger size is a protocol violation and ends the
// connection before anything is allocated for it, as do frames the guard
// cannot follow (a truncated or malformed header, a transfer performative it
// cannot parse). The memory the guard keeps is one read buffer of a frame's
// size, plus, per delivery in progress (at most one per link, and at most
// maxDeliveriesInProgress), its payload up to the max message size.

// guardMaxFrameSize is the largest frame the guard accepts. It is also the
// max-frame-size go-amqp announces in its open (go-amqp's own default), so a
// peer that sends a larger frame breaks the protocol.
const guardMaxFrameSize = 64 << 10

// maxDeliveriesInProgress bounds the multi-frame deliveries a connection may
// have under way at once (one per receiver link at most); past it the peer is
// misbehaving and the connection ends.
const maxDeliveriesInProgress = 1024

// keepBuffer is the largest payload buffer kept for reuse after a delivery.
const keepBuffer = 1 << 20

// maxReason bounds the reason carried by a poison message.
const maxReason = 240

// maxCloseReason bounds the description of the close the guard sends; the
// close then fits a list8.
const maxCloseReason = 200

// maxGuardMessage is the largest max message size the guard enforces.
const maxGuardMessage = math.MaxInt32 - guardMaxFrameSize

// minRead is the least free space a read from the socket is given.
const minRead = 512

// GuardError is the error go-amqp gets from the connection (and the
// connection ends with) when the peer sends frames the guard cannot follow.
// The peer is told in go-amqp's close, as amqp:connection:framing-error.
type GuardError struct {
	// Offset is where in the inbound stream the frame starts.
	Offset int64
	Reason string
}

func (e *GuardError) Error() string {
	return "amqpactor: inbound frame at byte " + strconv.FormatInt(e.Offset, 10) + ": " + e.Reason + " (" + framingError + ")"
}

// framingError is the condition of the close the peer gets when the guard
// refused its stream.
const framingError = "amqp:connection:framing-error"

// maxDispositionRange bounds the delivery-ids one disposition may span.
// go-amqp walks every id of a range, one map lookup each, in the session's
// mux goroutine and again in each link's, so the width is work a peer
// orders with a few bytes (first 0, last 4294967295 never ends). The guard
// sees only inbound frames, so it cannot know what was sent and is still
// unsettled. The bound is far above what an honest peer settles at once and
// small enough that go-amqp's walk stays short. A peer that settles more at
// once loses the connection and the runtime reconnects: publishes not yet
// confirmed are sent again, deliveries not settled come again.
const maxDispositionRange = 1 << 16

// dispositionHonest refuses a disposition (b at its field list) whose range
// is wider than maxDispositionRange, or one go-amqp would loop on for ever:
// its loop runs first..last with a uint32 counter, which never passes
// 4294967295. A range that wraps below first is width last-first+1 in
// serial-number arithmetic, and refused the same way when that is too wide.
func dispositionHonest(b []byte) error {
	first, last, ok := dispositionRange(b)
	if !ok {
		return nil // go-amqp refuses what the guard cannot decode
	}
	if width := uint64(last-first) + 1; width > maxDispositionRange {
		return fmt.Errorf("delivery-ids %d..%d span %d, more than the %d one disposition may settle", first, last, width, maxDispositionRange)
	}
	if last == math.MaxUint32 && first <= last {
		return fmt.Errorf("delivery-ids %d..%d reach %d, which go-amqp cannot settle", first, last, uint32(math.MaxUint32))
	}
	return nil
}

// Write is go-amqp's. Once the guard has refused the peer's stream, go-amqp
// ends the connection with a bare close; that close tells the peer why.
func (g *guard) Write(p []byte) (int, error) {
	if len(p) >= 11 && p[10] == 0x18 && p[8] == 0 && p[9] == 0x53 && p[5] == 0 && p[4] == 2 {
		if ge := g.failed.Load(); ge != nil {
			if _, err := g.Conn.Write(closeFrame(ge.Reason)); err != nil {
				return 0, err
			}
			return len(p), nil
		}
	}
	return g.Conn.Write(p)
}

// closeFrame encodes a close on channel 0 carrying the error
// {framingError, reason}.
func closeFrame(reason string) []byte {
	reason = truncated(reason, maxCloseReason)
	errList := []byte{0xc0, 0, 2, 0xa3, byte(len(framingError))}
	errList = append(errList, framingError...)
	errList = append(errList, 0xa1, byte(len(reason)))
	errList = append(errList, reason...)
	errList[1] = byte(len(errList) - 2)
	body := []byte{0x00, 0x53, 0x18, 0xc0, 0, 1, 0x00, 0x53, 0x1d}
	body = append(body, errList...)
	body[4] = byte(len(body) - 5)
	b := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
	b = append(b, 2, 0, 0, 0)
	return append(b, body...)
}

// truncated cuts s to at most n bytes, at a rune boundary.
func truncated(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

type deliveryKey struct {
	channel uint16
	handle  uint32
}

// delivery is a multi-frame transfer in progress.
type delivery struct {
	payload []byte
	size    uint64 // every payload byte seen, also past the max
	over    bool   // past the max message size: payload is no longer kept
}

// guard is the net.Conn go-amqp gets: reads are checked, everything else is
// the wrapped connection's.
type guard struct {
	net.Conn

	check      func(payload []byte) error
	maxFrame   uint32
	maxMessage uint64

	buf      []byte // bytes read from the socket; buf[r:w] not yet followed
	r, w     int
	consumed int64 // stream offset of buf[0]

	// out holds what is ready for go-amqp, in order: slices of buf, of a
	// delivery's payload or of the poison buffer, valid until drained.
	out  [3][]byte
	nout int

	expectHeader bool  // a protocol header comes next
	sasl         bool  // in the SASL layer
	readErr      error // from the socket, returned once buf has no whole unit
	err          error // sticky: what Read returns

	deliveries map[deliveryKey]*delivery
	spare      []*delivery // finished deliveries, for reuse
	last       *delivery   // the delivery whose payload out may hold
	poison     []byte

	mu       sync.Mutex
	peerCaps []string
	// channelMax is the open's channel-max plus one (the sessions the
	// peer allows at once); zero until an open the guard could follow.
	channelMax int
	// failed is why the guard ended the connection, for Conn.Err: go-amqp
	// keeps a read error's text but not the error.
	failed atomic.Pointer[GuardError]
}

func newGuard(c net.Conn, maxMessage uint64, check func([]byte) error) *guard {
	if maxMessage == 0 {
		maxMessage = DefaultMaxMessageSize
	}
	// The last frame of a delivery carries its whole payload, and go-amqp
	// refuses a frame over math.MaxInt32 bytes.
	maxMessage = min(maxMessage, maxGuardMessage)
	if check == nil {
		lim := amqpscan.Limits{MaxSize: maxMessage}
		check = func(p []byte) error { return amqpscan.Check(p, lim) }
	}
	// The read buffer holds a whole frame from the start, so that one read
	// system call takes in several 4 KiB deliveries.
	return &guard{
		Conn:         c,
		check:        check,
		maxFrame:     guardMaxFrameSize,
		maxMessage:   maxMessage,
		buf:          make([]byte, 0, guardMaxFrameSize),
		expectHeader: true,
		deliveries:   map[deliveryKey]*delivery{},
	}
}

// Read hands go-amqp the next checked bytes: whole frames where they fit,
// as many as are already read from the socket.
func (g *guard) Read(p []byte) (int, error) {
	n := 0
	for {
		n += g.drain(p[n:])
		if n == len(p) && len(p) > 0 {
			return n, nil
		}
		if g.err != nil {
			if n > 0 {
				return n, nil
			}
			return 0, g.err
		}
		ok, err := g.next()
		if err != nil {
			g.err = err
			if ge, isGuard := err.(*GuardError); isGuard {
				g.failed.Store(ge)
			}
			continue
		}
		if ok {
			continue
		}
		if n > 0 || len(p) == 0 {
			return n, nil
		}
		if g.readErr != nil {
			// Whole frames read before the error went on; a part of one
			// never does.
			g.err = g.readErr
			continue
		}
		g.readErr = g.fill()
	}
}

// drain copies pending output into p.
func (g *guard) drain(p []byte) int {
	n := 0
	for g.nout > 0 && n < len(p) {
		seg := g.out[0]
		c := copy(p[n:], seg)
		n += c
		if c < len(seg) {
			g.out[0] = seg[c:]
			break
		}
		copy(g.out[:], g.out[1:g.nout])
		g.nout--
		g.out[g.nout] = nil
	}
	if g.nout == 0 && g.last != nil {
		g.recycle(g.last)
		g.last = nil
	}
	return n
}

func (g *guard) emit(segs ...[]byte) {
	for _, s := range segs {
		if len(s) > 0 {
			g.out[g.nout] = s
			g.nout++
		}
	}
}

// fill reads from the socket once. Output must be drained: it may move buf.
func (g *guard) fill() error {
	if g.r == g.w {
		g.consumed += int64(g.r)
		g.r, g.w = 0, 0
		g.buf = g.buf[:0]
	}
	need := g.needed()
	if g.r > 0 && (cap(g.buf)-g.r < need || cap(g.buf)-g.w < minRead) {
		g.consumed += int64(g.r)
		g.w = copy(g.buf[:cap(g.buf)], g.buf[g.r:g.w])
		g.r = 0
		g.buf = g.buf[:g.w]
	}
	if g.w == cap(g.buf) {
		// A whole unit is buffered whenever the buffer is full, and next
		// follows it before any fill: never here.
		return &GuardError{Offset: g.consumed + int64(g.w), Reason: "read buffer full"}
	}
	n, err := g.Conn.Read(g.buf[g.w:cap(g.buf)])
	g.w += n
	g.buf = g.buf[:g.w]
	return err
}

// needed is how many bytes the unit at buf[r:] takes, as far as known.
func (g *guard) needed() int {
	avail := g.buf[g.r:g.w]
	if g.expectHeader || len(avail) < 8 {
		return 8
	}
	size := binary.BigEndian.Uint32(avail)
	if size < 8 || size > g.maxFrame {
		return 8 // next refuses it
	}
	return int(size)
}

func (g *guard) fail(at int, format string, args ...any) error {
	return &GuardError{Offset: g.consumed + int64(at), Reason: fmt.Sprintf(format, args...)}
}

var (
	protoHeader = []byte("AMQP")
)

// next follows one unit (a protocol header or a frame) that is wholly in buf
// and queues its output; false when more bytes are needed.
func (g *guard) next() (bool, error) {
	start := g.r
	avail := g.buf[g.r:g.w]
	if len(avail) < 8 {
		return false, nil
	}
	if g.expectHeader {
		if string(avail[:4]) != string(protoHeader) {
			return false, g.fail(start, "expected an AMQP protocol header, got % x", avail[:8])
		}
		// 3: SASL; 0: AMQP. Anything else is go-amqp's to refuse.
		g.sasl = avail[4] == 3
		g.expectHeader = false
		g.r += 8
		g.emit(avail[:8])
		return true, nil
	}
	size := binary.BigEndian.Uint32(avail)
	if size < 8 {
		return false, g.fail(start, "frame size %d is below the 8-byte header", size)
	}
	if size > g.maxFrame {
		return false, g.fail(start, "frame size %d exceeds the max-frame-size of %d", size, g.maxFrame)
	}
	if len(avail) < int(size) {
		return false, nil
	}
	frame := avail[:size:size]
	g.r += int(size)
	if size == 8 {
		g.emit(frame) // a heartbeat
		return true, nil
	}
	doff := int(frame[4]) * 4
	if g.sasl {
		if doff >= 8 && doff+3 <= len(frame) && frame[doff] == 0 && frame[doff+1] == 0x53 && frame[doff+2] == 0x44 {
			// sasl-outcome: the AMQP protocol header follows.
			g.expectHeader = true
		}
		g.emit(frame)
		return true, nil
	}
	if frame[4] != 2 {
		// go-amqp reads the body at byte 8 whatever the data offset says;
		// the guard must see the body go-amqp decodes, and no extended
		// header is defined.
		return false, g.fail(start, "frame data offset %d (extended headers are not supported)", frame[4])
	}
	if frame[5] != 0 {
		g.emit(frame) // not an AMQP frame: go-amqp refuses it
		return true, nil
	}
	channel := binary.BigEndian.Uint16(frame[6:8])
	body := frame[8:]
	if len(body) >= 3 && body[0] == 0 && body[1] == 0x53 {
		if body[2] == 0x14 {
			return true, g.transfer(start, frame, channel)
		}
		if err := checkPerformative(body); err != nil {
			return false, g.fail(start, "performative 0x%02x on channel %d: %v", body[2], channel, err)
		}
		switch body[2] {
		case 0x10:
			g.open(body[3:])
		case 0x15:
			if err := dispositionHonest(body[3:]); err != nil {
				return false, g.fail(start, "disposition on channel %d: %v", channel, err)
			}
		case 0x16: // detach: a delivery in progress on the link is gone
			if h, ok := firstUint(body[3:]); ok {
				g.forget(deliveryKey{channel, h})
			}
		case 0x17: // end: every delivery in progress on the session is gone
			g.forgetChannel(channel)
		}
	}
	g.emit(frame)
	return true, nil
}

// transfer follows one transfer frame.
func (g *guard) transfer(start int, frame []byte, channel uint16) error {
	t, err := parseTransfer(frame[11:])
	if err != nil {
		return g.fail(start, "transfer on channel %d: %v", channel, err)
	}
	payloadAt := 11 + t.end
	perf, payload := frame[:payloadAt], frame[payloadAt:]
	key := deliveryKey{channel, t.handle}
	var d *delivery
	if len(g.deliveries) > 0 {
		d = g.deliveries[key]
	}
	if t.aborted {
		if d != nil {
			delete(g.deliveries, key)
			g.recycle(d)
		}
		g.emit(frame)
		return nil
	}
	if d == nil && !t.more {
		switch {
		case uint64(len(payload)) > g.maxMessage:
			g.poisoned(perf, fmt.Sprintf("message of %d bytes exceeds the max message size of %d bytes", len(payload), g.maxMessage))
		default:
			if err := g.check(payload); err != nil {
				g.poisoned(perf, reasonOf(err))
				return nil
			}
			g.emit(frame)
		}
		return nil
	}
	if d == nil {
		if len(g.deliveries) >= maxDeliveriesInProgress {
			return g.fail(start, "more than %d multi-frame deliveries in progress", maxDeliveriesInProgress)
		}
		d = g.newDelivery()
		g.deliveries[key] = d
	}
	d.size += uint64(len(payload))
	if !d.over {
		if d.size > g.maxMessage {
			d.over = true
			d.payload = d.payload[:0]
		} else {
			d.payload = append(d.payload, payload...)
		}
	}
	if t.more {
		g.emit(resized(perf))
		return nil
	}
	delete(g.deliveries, key)
	switch {
	case d.over:
		g.poisoned(perf, fmt.Sprintf("message of %d bytes exceeds the max message size of %d bytes", d.size, g.maxMessage))
		g.recycle(d)
	default:
		if err := g.check(d.payload); err != nil {
			g.poisoned(perf, reasonOf(err))
			g.recycle(d)
			return nil
		}
		binary.BigEndian.PutUint32(perf, uint32(len(perf)+len(d.payload)))
		g.emit(perf, d.payload)
		g.last = d // recycled once drained
	}
	return nil
}

// resized sets the frame size in the header of perf to len(perf): the frame
// without its payload.
func resized(perf []byte) []byte {
	binary.BigEndian.PutUint32(perf, uint32(len(perf)))
	return perf
}

// poisoned queues perf (header and transfer performative) with the poison
// message in place of the payload.
func (g *guard) poisoned(perf []byte, reason string) {
	g.poison = appendPoison(g.poison[:0], reason)
	binary.BigEndian.PutUint32(perf, uint32(len(perf)+len(g.poison)))
	g.emit(perf, g.poison)
}

func reasonOf(err error) string {
	var se *amqpscan.Error
	if errors.As(err, &se) {
		return se.Reason + " (at byte " + strconv.Itoa(se.Offset) + " of the payload)"
	}
	return err.Error()
}

func (g *guard) newDelivery() *delivery {
	if n := len(g.spare); n > 0 {
		d := g.spare[n-1]
		g.spare = g.spare[:n-1]
		return d
	}
	return &delivery{}
}

func (g *guard) recycle(d *delivery) {
	if cap(d.payload) > keepBuffer {
		d.payload = nil
	}
	d.payload, d.size, d.over = d.payload[:0], 0, false
	if len(g.spare) < 4 {
		g.spare = append(g.spare, d)
	}
}

func (g *guard) forget(k deliveryKey) {
	if d, ok := g.deliveries[k]; ok {
		delete(g.deliveries, k)
		g.recycle(d)
	}
}

func (g *guard) forgetChannel(ch uint16) {
	for k, d := range g.deliveries {
		if k.channel == ch {
			delete(g.deliveries, k)
			g.recycle(d)
		}
	}
}

// PeerOffers reports whether the peer's open frame offered capability.
func (g *guard) PeerOffers(capability string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.peerCaps {
		if c == capability {
			return true
		}
	}
	return false
}

// open records the offered-capabilities of the peer's open performative;
// b starts at its field list. A field the guard cannot follow leaves the
// capabilities empty: go-amqp decides whether the open is acceptable.
func (g *guard) open(b []byte) {
	caps := offeredCapabilities(b)
	cm, ok := openChannelMax(b)
	g.mu.Lock()
	g.peerCaps = caps
	if ok {
		g.channelMax = int(cm) + 1
	}
	g.mu.Unlock()
}

// PeerSessions is the number of sessions the peer's open allows at once
// (its channel-max plus one; channels start at zero), or zero before an
// open the guard could read.
func (g *guard) PeerSessions() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.channelMax
}

// appendPoison appends the poison message for reason: a delivery-annotations
// section {PoisonAnnotation: reason} and an amqp-value null body.
func appendPoison(b []byte, reason string) []byte {
	reason = truncated(reason, maxReason)
	key := transport.PoisonAnnotation
	// map32: size counts the count field and the pairs.
	pairs := 2 + len(key) + 5 + len(reason)
	b = append(b, 0x00, 0x53, 0x71, 0xd1)
	b = binary.BigEndian.AppendUint32(b, uint32(4+pairs))
	b = binary.BigEndian.AppendUint32(b, 2)
	b = append(b, 0xa3, byte(len(key)))
	b = append(b, key...)
	b = append(b, 0xb1)
	b = binary.BigEndian.AppendUint32(b, uint32(len(reason)))
	b = append(b, reason...)
	return append(b, 0x00, 0x53, 0x77, 0x40)
}
