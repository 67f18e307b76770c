package amqpscan

import (
	"encoding/binary"
	"testing"
)

// gen builds an AMQP message from fuzzer bytes, choice by choice, so the
// fuzzer explores deep, well-formed structure that random bytes rarely
// reach. Clean, it writes only what go-amqp decodes and Check must pass,
// in every encoding form; dirty, it now and then writes one of the things
// either of them refuses.
type gen struct {
	data     []byte
	i        int
	dirty    bool
	out      []byte
	short    int // inside a map8 of an array: keep values small
	nonEmpty int // in an array of strings: no empty ones
}

func (g *gen) byte() byte {
	if g.i >= len(g.data) {
		return 0
	}
	b := g.data[g.i]
	g.i++
	return b
}

func (g *gen) n(k int) int { return int(g.byte()) % k }

func (g *gen) done() bool { return g.i >= len(g.data) }

// bad reports whether to write something wrong here.
func (g *gen) bad() bool { return g.dirty && g.n(24) == 0 }

func (g *gen) put(b ...byte) { g.out = append(g.out, b...) }

// random bytes from the input.
func (g *gen) bytes(n int) {
	for range n {
		g.put(g.byte())
	}
}

func (g *gen) message() []byte {
	for sections := 0; sections < 8 && !g.done(); sections++ {
		codes := [...]byte{0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78}
		code := codes[g.n(len(codes))]
		if g.bad() {
			code = g.byte()
		}
		if g.n(8) == 0 {
			g.put(0x00, 0x80)
			g.out = binary.BigEndian.AppendUint64(g.out, uint64(code))
		} else {
			g.put(0x00, 0x53, code)
		}
		switch code {
		case 0x70:
			g.composite(1, []fieldKind{fBool, fUbyte, fMillis, fBool, fUint})
		case 0x73:
			g.composite(1, []fieldKind{fAny, fBinary, fString, fString, fString, fAny, fString, fString,
				fTimestamp, fTimestamp, fString, fUint, fString})
		case 0x71, 0x72, 0x78:
			g.nullOr(func() { g.mapv(1, keysAnnotation) })
		case 0x74:
			g.nullOr(func() { g.mapv(1, keysString) })
		case 0x75:
			g.nullOr(func() { g.field(fBinary, 1) })
		case 0x76:
			g.nullOr(func() { g.list(1) })
		case 0x77:
			g.value(1)
		default:
			g.value(1)
		}
	}
	if g.dirty && g.n(16) == 0 && len(g.out) > 0 {
		g.out = g.out[:g.n(len(g.out))] // a truncation
	}
	return g.out
}

func (g *gen) nullOr(f func()) {
	if g.n(6) == 0 {
		g.put(0x40)
		return
	}
	f()
}

// compound writes a list, map or array: the constructor forms, then
// size and count around what body writes.
func (g *gen) compound(c8, c32 byte, count int, body func()) {
	small := g.n(2) == 0
	at := len(g.out)
	g.put(c32, 0, 0, 0, 0, 0, 0, 0, 0)
	start := len(g.out)
	body()
	size := len(g.out) - start
	if g.bad() {
		count += g.n(3) - 1
	}
	if small && size+1 <= 255 && count <= 255 {
		g.out[at] = c8
		g.out[at+1] = byte(size + 1)
		g.out[at+2] = byte(count)
		g.out = append(g.out[:at+3], g.out[start:]...)
		if g.bad() {
			g.out[at+1] += byte(g.n(3)) - 1
		}
		return
	}
	binary.BigEndian.PutUint32(g.out[at+1:], uint32(size+4))
	binary.BigEndian.PutUint32(g.out[at+5:], uint32(count))
	if g.bad() {
		g.out[at+4] += byte(g.n(3)) - 1
	}
}

func (g *gen) composite(d int, fields []fieldKind) {
	if g.bad() {
		g.value(d)
		return
	}
	n := g.n(len(fields) + 1)
	required := len(fields) > 0 && fields[0] == fCondition
	if required && n == 0 {
		n = 1
	}
	if g.bad() {
		n++
	}
	if n == 0 && g.n(2) == 0 {
		g.put(0x45)
		return
	}
	g.compound(0xc0, 0xd0, n, func() {
		for i := range n {
			if i >= len(fields) || g.bad() {
				g.value(d + 1)
				continue
			}
			if g.n(5) == 0 && (i > 0 || !required) {
				g.put(0x40)
				continue
			}
			g.field(fields[i], d+1)
		}
	})
}

// field writes a value of a kind a composite field decodes into, in any
// of its forms.
func (g *gen) field(k fieldKind, d int) {
	switch k {
	case fBool:
		g.pick([]byte{0x41, 0x42, 0x56})
	case fUbyte:
		g.put(0x50, g.byte())
	case fMillis:
		g.pick([]byte{0x43, 0x44, 0x50, 0x52, 0x53, 0x60, 0x70, 0x80})
	case fUint:
		g.pick([]byte{0x43, 0x52, 0x70})
	case fString, fCondition:
		g.variable([]byte{0xa1, 0xb1, 0xa3, 0xb3}[g.n(4)])
	case fBinary:
		g.variable([]byte{0xa0, 0xb0}[g.n(2)])
	case fTimestamp:
		g.put(0x83)
		g.bytes(8)
	case fStringMap:
		g.mapv(d, keysString)
	default:
		g.value(d)
	}
}

// pick writes one of the fixed-width constructors cs and its value.
func (g *gen) pick(cs []byte) {
	c := cs[g.n(len(cs))]
	g.put(c)
	w, _ := fixed(c)
	g.bytes(w)
}

func (g *gen) variable(c byte) {
	g.put(c)
	g.variableBody(c)
}

// variableBody writes the length and bytes of a string, symbol or binary.
func (g *gen) variableBody(c byte) {
	n := g.n(6)
	if n == 5 && g.short == 0 {
		n = 256 + g.n(8)
	}
	if n == 0 && g.nonEmpty > 0 {
		n = 1
	}
	if c&0xf0 == 0xa0 && n > 255 {
		n = 255
	}
	if c&0xf0 == 0xa0 {
		g.put(byte(n))
	} else {
		g.out = binary.BigEndian.AppendUint32(g.out, uint32(n))
	}
	g.bytes(n)
}

var scalarCodes = []byte{
	0x40, 0x41, 0x42, 0x43, 0x44, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x60, 0x61,
	0x70, 0x71, 0x72, 0x80, 0x81, 0x82, 0x83, 0x98,
}

func (g *gen) scalar(withBinary bool) {
	k := g.n(len(scalarCodes) + 6)
	if k < len(scalarCodes) {
		g.pick(scalarCodes[k : k+1])
		return
	}
	vs := []byte{0xa1, 0xb1, 0xa3, 0xb3, 0xa0, 0xb0}
	c := vs[k-len(scalarCodes)]
	if !withBinary && c&0x0f == 0 {
		c |= 0x01
	}
	g.variable(c)
}

func (g *gen) value(d int) {
	if g.bad() {
		switch g.n(6) {
		case 0:
			g.put([]byte{0x73, 0x74, 0x84, 0x94}[g.n(4)])
			g.bytes(4)
		case 1:
			g.put(g.byte())
		case 2:
			g.put(0x00)
			g.value(d + 1)
			g.value(d + 1)
		default:
			g.put(g.byte())
			g.bytes(g.n(9))
		}
		return
	}
	if d >= DefaultMaxDepth || g.done() {
		g.scalar(true)
		return
	}
	switch g.n(10) {
	case 0:
		g.list(d)
	case 1:
		g.mapv(d, keysAny)
	case 2:
		g.array(d)
	case 3:
		if d+2 > DefaultMaxDepth { // an error's list and map
			g.scalar(true)
			return
		}
		g.described(d)
	default:
		g.scalar(true)
	}
}

func (g *gen) list(d int) {
	n := g.n(5)
	if n == 0 && g.n(2) == 0 {
		g.put(0x45)
		return
	}
	g.compound(0xc0, 0xd0, n, func() {
		for range n {
			g.value(d + 1)
		}
	})
}

func (g *gen) mapv(d int, rule keyRule) {
	n := g.n(4)
	g.compound(0xc1, 0xd1, 2*n, func() { g.pairs(d, rule, n) })
}

func (g *gen) pairs(d int, rule keyRule, n int) {
	for range n {
		switch {
		case g.bad():
			g.value(d + 1)
		case rule == keysAnnotation:
			switch g.n(4) {
			case 0:
				g.pick([]byte{0x44, 0x53, 0x80})
			case 1:
				g.pick([]byte{0x55, 0x81})
			default:
				g.variable([]byte{0xa3, 0xb3}[g.n(2)])
			}
		case rule == keysString:
			g.variable([]byte{0xa1, 0xb1, 0xa3, 0xb3}[g.n(4)])
		default:
			g.scalar(false)
		}
		g.value(d + 1)
	}
}

func (g *gen) array(d int) {
	n := g.n(4)
	elems := []byte{0x50, 0x51, 0x60, 0x61, 0x43, 0x52, 0x70, 0x54, 0x71, 0x44, 0x53, 0x80, 0x55,
		0x81, 0x72, 0x82, 0x56, 0x41, 0x42, 0x83, 0x98, 0xa0, 0xa1, 0xa3, 0xb0, 0xb1, 0xb3, 0xc1, 0xd1}
	c := elems[g.n(len(elems))]
	if g.bad() {
		c = g.byte()
	}
	if w, ok := fixed(c); ok && w == 0 && n > 1 {
		n = 1
	}
	g.compound(0xe0, 0xf0, n, func() {
		g.put(c)
		for range n {
			switch c {
			case 0xa0, 0xa1, 0xa3, 0xb0, 0xb1, 0xb3:
				// go-amqp refuses an array of n of these with fewer
				// than 2n bytes left from its constructor to the end
				// of the message: keep each at least 2 bytes.
				g.nonEmpty++
				g.variableBody(c)
				g.nonEmpty--
			case 0xc1, 0xd1:
				g.mapElement(c, d+1)
			default:
				w, _ := fixed(c)
				g.bytes(w)
			}
		}
	})
}

// mapElement writes a map of an array of maps: no constructor, the
// array's width, and small scalar entries so that a map8 stays small.
func (g *gen) mapElement(c byte, d int) {
	m := g.n(3)
	at := len(g.out)
	g.put(0, 0, 0, 0, 0, 0, 0, 0)
	start := len(g.out)
	for range m {
		g.short++
		g.scalar(false)
		if g.bad() {
			g.value(d + 1)
		} else {
			g.scalar(true)
		}
		g.short--
	}
	size := len(g.out) - start
	if c == 0xc1 {
		g.out[at] = byte(size + 1)
		g.out[at+1] = byte(2 * m)
		g.out = append(g.out[:at+2], g.out[start:]...)
		return
	}
	binary.BigEndian.PutUint32(g.out[at:], uint32(size+4))
	binary.BigEndian.PutUint32(g.out[at+4:], uint32(2*m))
}

func (g *gen) described(d int) {
	g.put(0x00)
	switch g.n(6) {
	case 0:
		g.variable([]byte{0xa3, 0xb3}[g.n(2)])
		g.value(d + 1)
	case 1:
		g.put(0x53, 0x1d)
		g.composite(d+1, []fieldKind{fCondition, fString, fStringMap})
	case 2:
		g.put(0x53, 0x2b+byte(g.n(4)))
		g.composite(d+1, nil)
	case 3:
		g.put(0x80)
		g.bytes(8)
		g.value(d + 1)
	default:
		g.put(0x53, 0x80+byte(g.n(0x80)))
		g.value(d + 1)
	}
}

// FuzzCheckGenerated runs the same oracle as FuzzCheck on messages the
// generator builds from the fuzzer's bytes. Clean messages must also pass
// Check: a rejection there is the scanner refusing something ordinary.
func FuzzCheckGenerated(f *testing.F) {
	for _, seed := range []string{"", "\x00", "\x07\x00\x01\x02\x03", "\x01\x09\x08\x07\x06\x05\x04\x03\x02\x01"} {
		f.Add(false, []byte(seed))
		f.Add(true, []byte(seed))
	}
	f.Fuzz(func(t *testing.T, dirty bool, data []byte) {
		g := gen{data: data, dirty: dirty}
		payload := g.message()
		err := Check(payload, Limits{})
		p, derr := decode(payload)
		if err == nil && (p != nil || derr != nil) {
			t.Fatalf("Check passed % x, go-amqp: panic %v, error %v", payload, p, derr)
		}
		if !dirty && err != nil {
			t.Fatalf("Check rejected a clean message % x: %v (go-amqp: panic %v, error %v)", payload, err, p, derr)
		}
	})
}
