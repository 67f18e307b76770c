// Package framecount counts AMQP 1.0 frames on the wire: a Parser reads a
// byte stream in chunks of any size and tallies its protocol headers and
// frames by performative, and a Proxy forwards loopback TCP connections to
// a broker and parses both directions. The A/B benchmark program uses it to
// report frames and bytes per message (go run ./test/bench/cmd/ab -frames).
//
// It parses as little as it counts: the 8-byte protocol headers (AMQP and
// SASL), the 8-byte frame header (size, doff, type, channel) and the
// descriptor of a performative (0x10 open .. 0x18 close, SASL 0x40 ..
// 0x44). A stream it cannot follow is counted as Unparsed from there on,
// and still forwarded.
package framecount

import (
	"encoding/binary"
	"sync"
)

// Kind is what a unit of the stream is.
type Kind int

const (
	Open Kind = iota
	Begin
	Attach
	Flow
	Transfer
	Disposition
	Detach
	End
	Close
	Empty    // a frame without a body: a heartbeat
	SASL     // a SASL frame (type 1)
	Header   // an 8-byte protocol header
	Other    // a frame whose body is not a known performative
	numKinds // not a kind
)

var kindNames = [numKinds]string{"open", "begin", "attach", "flow", "transfer", "disposition",
	"detach", "end", "close", "empty", "sasl", "header", "other"}

func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return "?"
	}
	return kindNames[k]
}

// Kinds lists every kind, in table order.
func Kinds() []Kind {
	ks := make([]Kind, numKinds)
	for i := range ks {
		ks[i] = Kind(i)
	}
	return ks
}

// Counts are the tallies of one direction.
type Counts struct {
	// Units counts protocol headers and frames by kind.
	Units [numKinds]int64
	// Bytes counts every byte seen, parsed or not.
	Bytes int64
	// Unparsed counts the bytes after the stream stopped making sense.
	Unparsed int64
}

// Frames is the number of frames (protocol headers excluded).
func (c Counts) Frames() int64 {
	var n int64
	for k, v := range c.Units {
		if Kind(k) != Header {
			n += v
		}
	}
	return n
}

// Sub is c - o, for a measured interval.
func (c Counts) Sub(o Counts) Counts {
	for i := range c.Units {
		c.Units[i] -= o.Units[i]
	}
	c.Bytes -= o.Bytes
	c.Unparsed -= o.Unparsed
	return c
}

// Add is c + o.
func (c Counts) Add(o Counts) Counts {
	for i := range c.Units {
		c.Units[i] += o.Units[i]
	}
	c.Bytes += o.Bytes
	c.Unparsed += o.Unparsed
	return c
}

// peek is how much of a frame the parser needs to classify it: the frame
// header, an extended header of up to 1 KiB (doff 255) and a 10-byte
// descriptor (0x00 0x80 and an 8-byte ulong).
const peek = 255*4 + 10

// Parser tallies one direction of a connection. It is safe for one writer
// (Write) and any number of readers (Counts).
type Parser struct {
	mu     sync.Mutex
	c      Counts
	broken bool
	// The unit under way: its first bytes in head, and how many bytes of
	// it are still to come once it is classified (skip).
	head   []byte
	want   int   // bytes of head needed before classifying
	skip   int64 // bytes of the current frame still to pass over
	inUnit bool
}

// NewParser returns a parser at the start of a connection.
func NewParser() *Parser { return &Parser{head: make([]byte, 0, peek)} }

// Counts returns the tallies so far.
func (p *Parser) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.c
}

// Write tallies b, the next bytes of the stream; it never fails.
func (p *Parser) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	p.c.Bytes += int64(n)
	for len(b) > 0 {
		if p.broken {
			p.c.Unparsed += int64(len(b))
			break
		}
		if p.skip > 0 {
			k := min(int64(len(b)), p.skip)
			p.skip -= k
			b = b[k:]
			continue
		}
		if !p.inUnit {
			p.inUnit, p.want, p.head = true, 8, p.head[:0]
		}
		k := min(len(b), p.want-len(p.head))
		p.head = append(p.head, b[:k]...)
		b = b[k:]
		if len(p.head) < p.want {
			continue
		}
		p.step()
	}
	return n, nil
}

// step classifies the unit in head once want bytes are there, or asks for
// more.
func (p *Parser) step() {
	h := p.head
	if string(h[:4]) == "AMQP" {
		p.c.Units[Header]++
		p.inUnit = false
		return
	}
	size := binary.BigEndian.Uint32(h)
	doff := int(h[4]) * 4
	if size < 8 || doff < 8 || uint64(doff) > uint64(size) {
		p.broken = true
		p.c.Unparsed += int64(len(h))
		return
	}
	// Ask for the extended header and descriptor, as far as the frame
	// goes.
	need := min(int(size), doff+10)
	if len(h) < need {
		p.want = need
		return
	}
	p.c.Units[classify(h[5], h[doff:need], int(size)-doff)]++
	p.skip = int64(size) - int64(len(h))
	p.inUnit = false
}

// classify names a frame of type typ whose body (bodyLen bytes) starts with
// desc.
func classify(typ byte, desc []byte, bodyLen int) Kind {
	if bodyLen == 0 {
		return Empty
	}
	var code uint64
	switch {
	case len(desc) >= 3 && desc[0] == 0x00 && desc[1] == 0x53:
		code = uint64(desc[2])
	case len(desc) >= 10 && desc[0] == 0x00 && desc[1] == 0x80:
		code = binary.BigEndian.Uint64(desc[2:])
	default:
		return Other
	}
	switch typ {
	case 0:
		if code >= 0x10 && code <= 0x18 {
			return Kind(code - 0x10)
		}
	case 1:
		if code >= 0x40 && code <= 0x44 {
			return SASL
		}
	}
	return Other
}
