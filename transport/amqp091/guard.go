package amqp091

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"

	"github.com/amqpactor/amqpactor/transport"
)

// The inbound guard sits between the socket (or TLS) and amqp091-go's frame
// reader, and checks every content header before amqp091-go parses it.
// amqp091-go fails a header whose field tables it will not read (more than
// 8,192 entries in a table or array, tables and arrays nested more than 32
// deep, a malformed table) with a frame error that closes the whole
// connection: every delivery in flight goes back to the queue behind the
// hostile one, which comes back first on the next connection, until a quorum
// queue's delivery limit drops it and those behind it. The guard hands such a
// header on as a harmless one, its table replaced by one entry,
// PoisonAnnotation, saying why; the body that follows goes on unchanged, so
// amqp091-go sees an ordinary delivery, which the receiver turns into a poison
// message (rejected alone, without requeue).
//
// Everything else passes untouched and in order: method, body and heartbeat
// frames stream through without a copy of their own, and a content header
// that passes is forwarded as it came. The framing itself is the broker's and
// is not second-guessed: a frame the guard cannot follow goes on to
// amqp091-go, which ends the connection as it would have.

// The bounds of a content header's field tables: amqp091-go's own
// (maxContainerElements and maxFieldDepth in its read.go), and those of the
// AMQP 1.0 payload scanner. The headers table is level 0; a table or array in
// it is level 1, and level 32 is the deepest read.
const (
	maxHeaderEntries = 8192
	maxHeaderDepth   = 32
)

// maxHeaderFrame is the largest content header the guard reads:
// amqp091-go's default frame size, which it asks the broker for. A larger
// header is poison, read no further than its fixed fields.
const maxHeaderFrame = 131072

// maxPoisonReason bounds the reason a poison message carries.
const maxPoisonReason = 240

const (
	frameHeader = 2
	frameEnd    = 0xCE

	// A content header: class-id, weight, body-size, property flags.
	headerFixed = 2 + 2 + 8 + 2

	propContentType     = 0x8000
	propContentEncoding = 0x4000
	propHeaders         = 0x2000
)

// guardConn is the inbound guard over one connection (see above).
type guardConn struct {
	net.Conn
	r *bufio.Reader

	out     []byte // checked bytes for amqp091-go
	hdr     [7]byte
	buf     []byte // the content header being checked
	pass    uint64 // bytes of the current frame that go on unread
	skip    uint64 // bytes of a replaced header still to discard
	raw     bool   // the broker answered with a protocol header: no frames
	started bool
	err     error
}

func guard(c net.Conn) *guardConn {
	return &guardConn{Conn: c, r: bufio.NewReaderSize(c, 64<<10)}
}

func (g *guardConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		switch {
		case len(g.out) > 0:
			n := copy(p, g.out)
			g.out = g.out[n:]
			return n, nil
		case g.raw:
			return g.r.Read(p)
		case g.pass > 0:
			n, err := g.r.Read(p[:min(uint64(len(p)), g.pass)])
			g.pass -= uint64(n)
			if err != nil {
				g.err, g.pass = err, 0
			}
			return n, err
		case g.err != nil:
			return 0, g.err
		case g.skip > 0:
			n, err := g.r.Discard(int(min(g.skip, math.MaxInt32)))
			g.skip -= uint64(n)
			g.err = err
		default:
			// Any read error ends amqp091-go's reader, and the
			// connection with it: nothing half read is resumed.
			g.err = g.next()
		}
	}
}

// ConnectionState is the TLS connection's, for amqp091-go's
// Connection.ConnectionState.
func (g *guardConn) ConnectionState() tls.ConnectionState {
	if c, ok := g.Conn.(interface{ ConnectionState() tls.ConnectionState }); ok {
		return c.ConnectionState()
	}
	return tls.ConnectionState{}
}

// next reads the next frame's header and sets up what goes on of it.
func (g *guardConn) next() error {
	if !g.started {
		g.started = true
		b, err := g.r.Peek(1)
		if err != nil {
			return err
		}
		if b[0] == 'A' {
			g.raw = true // "AMQP" and a version: amqp091-go reports it
			return nil
		}
	}
	if _, err := io.ReadFull(g.r, g.hdr[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(g.hdr[3:7])
	if g.hdr[0] != frameHeader || size < headerFixed {
		g.out = g.hdr[:]
		g.pass = uint64(size) + 1
		return nil
	}
	if size > maxHeaderFrame {
		var fixed [headerFixed]byte
		if _, err := io.ReadFull(g.r, fixed[:]); err != nil {
			return err
		}
		g.out = poisonHeader(g.buf[:0], g.hdr[1:3], fixed[:], nil, nil,
			fmt.Sprintf("a content header of %d bytes, over %d", size, maxHeaderFrame))
		g.skip = uint64(size) - headerFixed + 1
		return nil
	}
	n := 7 + int(size) + 1
	if cap(g.buf) < n {
		g.buf = make([]byte, n)
	}
	g.buf = g.buf[:n]
	copy(g.buf, g.hdr[:])
	if _, err := io.ReadFull(g.r, g.buf[7:]); err != nil {
		return err
	}
	payload := g.buf[7 : 7+size]
	c := checkHeader(payload)
	if c.reason == "" {
		g.out = g.buf
		return nil
	}
	// Rebuilt after the original in the same buffer, which the rewrite
	// reads from.
	var before, after []byte
	if c.propsOK {
		before, after = payload[headerFixed:c.tableStart], payload[c.tableEnd:]
	}
	g.out = poisonHeader(g.buf[n:n], g.hdr[1:3], payload[:headerFixed], before, after, c.reason)
	return nil
}

// poisonHeader appends to dst a content-header frame on channel (2 bytes)
// with the fixed fields of the original (class-id, weight, body-size, flags)
// whose headers table is only PoisonAnnotation with reason. before and after
// are the original's properties either side of its table, kept when they
// parse; without them the header carries its table only.
func poisonHeader(dst, channel, fixed, before, after []byte, reason string) []byte {
	if len(reason) > maxPoisonReason {
		reason = reason[:maxPoisonReason]
	}
	flags := binary.BigEndian.Uint16(fixed[12:14])
	if before == nil && after == nil {
		flags = 0
	}
	flags |= propHeaders
	key := transport.PoisonAnnotation
	table := 1 + len(key) + 1 + 4 + len(reason)
	size := headerFixed + len(before) + 4 + table + len(after)
	dst = append(dst, frameHeader, channel[0], channel[1])
	dst = binary.BigEndian.AppendUint32(dst, uint32(size))
	dst = append(dst, fixed[:12]...)
	dst = binary.BigEndian.AppendUint16(dst, flags)
	dst = append(dst, before...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(table))
	dst = append(dst, byte(len(key)))
	dst = append(dst, key...)
	dst = append(dst, 'S')
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(reason)))
	dst = append(dst, reason...)
	dst = append(dst, after...)
	return append(dst, frameEnd)
}

// headerCheck is what checkHeader found.
type headerCheck struct {
	reason     string // empty: amqp091-go reads the header
	propsOK    bool   // the properties around the table parse
	tableStart int    // the headers table's length field, in the payload
	tableEnd   int
}

// checkHeader follows amqp091-go's parseHeaderFrame through a content
// header's payload. It is stricter than amqp091-go in one way only: a table
// or array must be exactly filled by its fields, where amqp091-go sometimes
// ends an array at a field cut short.
func checkHeader(p []byte) headerCheck {
	var c headerCheck
	flags := binary.BigEndian.Uint16(p[12:14])
	b := p[headerFixed:]
	at := func() int { return len(p) - len(b) }
	shortstr := func() bool {
		if len(b) < 1 || len(b) < 1+int(b[0]) {
			return false
		}
		b = b[1+int(b[0]):]
		return true
	}
	fixed := func(n int) bool {
		if len(b) < n {
			return false
		}
		b = b[n:]
		return true
	}
	truncated := func(what string) headerCheck {
		return headerCheck{reason: fmt.Sprintf("malformed content header: %s cut short at byte %d", what, at())}
	}
	if flags&propContentType != 0 && !shortstr() {
		return truncated("content-type")
	}
	if flags&propContentEncoding != 0 && !shortstr() {
		return truncated("content-encoding")
	}
	if flags&propHeaders != 0 {
		c.tableStart = at()
		if len(b) < 4 {
			return truncated("headers")
		}
		n := binary.BigEndian.Uint32(b)
		if n > math.MaxInt32 || uint64(len(b)-4) < uint64(n) {
			return truncated("headers")
		}
		c.reason = checkFields(b[4:4+n], 0, true)
		b = b[4+n:]
		c.tableEnd = at()
	}
	rest := []struct {
		flag uint16
		name string
		n    int // 0: a shortstr
	}{
		{0x1000, "delivery-mode", 1}, {0x0800, "priority", 1}, {0x0400, "correlation-id", 0},
		{0x0200, "reply-to", 0}, {0x0100, "expiration", 0}, {0x0080, "message-id", 0},
		{0x0040, "timestamp", 8}, {0x0020, "type", 0}, {0x0010, "user-id", 0},
		{0x0008, "app-id", 0}, {0x0004, "reserved", 0},
	}
	for _, f := range rest {
		if flags&f.flag == 0 {
			continue
		}
		if (f.n == 0 && !shortstr()) || (f.n > 0 && !fixed(f.n)) {
			return truncated(f.name)
		}
	}
	// amqp091-go discards what follows the properties.
	c.propsOK = true
	if c.reason != "" {
		c.reason = "header table: " + c.reason
	}
	return c
}

// checkFields checks the fields of a table (each after its key) or, when
// not table, of an array, at level depth; it answers why amqp091-go would
// fail it, or "".
func checkFields(b []byte, depth int, table bool) string {
	if depth > maxHeaderDepth {
		return fmt.Sprintf("tables and arrays nested more than %d deep", maxHeaderDepth)
	}
	for n := 0; len(b) > 0; n++ {
		if n == maxHeaderEntries && table {
			return fmt.Sprintf("a table of more than %d entries at level %d", maxHeaderEntries, depth)
		}
		if n == maxHeaderEntries {
			return fmt.Sprintf("an array of more than %d elements at level %d", maxHeaderEntries, depth)
		}
		if table {
			if len(b) < 1+int(b[0]) {
				return "a key cut short"
			}
			b = b[1+int(b[0]):]
		}
		var why string
		if b, why = checkField(b, depth); why != "" {
			return why
		}
	}
	return ""
}

// checkField checks one field value in a container at level depth and
// returns what follows it.
func checkField(b []byte, depth int) ([]byte, string) {
	if len(b) == 0 {
		return nil, "a field without a type"
	}
	typ, b := b[0], b[1:]
	var n int
	switch typ {
	case 'V':
		return b, ""
	case 't', 'B', 'b':
		n = 1
	case 's', 'u':
		n = 2
	case 'I', 'i', 'f':
		n = 4
	case 'D':
		n = 5
	case 'l', 'd', 'T':
		n = 8
	case 'S', 'x', 'A', 'F':
		if len(b) < 4 {
			return nil, fmt.Sprintf("a %q field cut short", typ)
		}
		size := binary.BigEndian.Uint32(b)
		if size > math.MaxInt32 || uint64(len(b)-4) < uint64(size) {
			return nil, fmt.Sprintf("a %q field of %d bytes where %d are left", typ, size, len(b)-4)
		}
		inner, rest := b[4:4+size], b[4+size:]
		switch typ {
		case 'A':
			return rest, checkFields(inner, depth+1, false)
		case 'F':
			return rest, checkFields(inner, depth+1, true)
		}
		return rest, ""
	default:
		return nil, fmt.Sprintf("a field of unknown type %q", typ)
	}
	if len(b) < n {
		return nil, fmt.Sprintf("a %q field cut short", typ)
	}
	return b[n:], ""
}
