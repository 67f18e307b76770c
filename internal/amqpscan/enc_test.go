package amqpscan

import (
	"encoding/binary"
	"fmt"

	"github.com/Azure/go-amqp"
)

// A small AMQP encoder for the tests: it writes exactly the forms asked for
// (str8 or str32, list8 or list32, ...), as other peers do, where go-amqp's
// own encoder always picks one.

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func u32(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
func u64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// sec is a section: descriptor 0x00 0x53 code, then its value.
func sec(code byte, v []byte) []byte { return cat([]byte{0x00, 0x53, code}, v) }

// secLong is a section whose descriptor is a full ulong.
func secLong(code byte, v []byte) []byte {
	return cat([]byte{0x00, 0x80}, u64(uint64(code)), v)
}

func desc(code byte, v []byte) []byte { return cat([]byte{0x00, 0x53, code}, v) }

func descSym(name string, v []byte) []byte { return cat([]byte{0x00}, sym8(name), v) }

func str8(s string) []byte  { return cat([]byte{0xa1, byte(len(s))}, []byte(s)) }
func str32(s string) []byte { return cat([]byte{0xb1}, u32(uint32(len(s))), []byte(s)) }
func sym8(s string) []byte  { return cat([]byte{0xa3, byte(len(s))}, []byte(s)) }
func sym32(s string) []byte { return cat([]byte{0xb3}, u32(uint32(len(s))), []byte(s)) }
func bin8(b []byte) []byte  { return cat([]byte{0xa0, byte(len(b))}, b) }
func bin32(b []byte) []byte { return cat([]byte{0xb0}, u32(uint32(len(b))), b) }

var (
	null   = []byte{0x40}
	vtrue  = []byte{0x41}
	vfalse = []byte{0x42}
	uint0  = []byte{0x43}
	ulong0 = []byte{0x44}
	list0  = []byte{0x45}
)

func smalluint(n byte) []byte  { return []byte{0x52, n} }
func smallulong(n byte) []byte { return []byte{0x53, n} }
func ubyte(n byte) []byte      { return []byte{0x50, n} }
func vuint(n uint32) []byte    { return cat([]byte{0x70}, u32(n)) }
func vulong(n uint64) []byte   { return cat([]byte{0x80}, u64(n)) }
func vlong(n int64) []byte     { return cat([]byte{0x81}, u64(uint64(n))) }
func vint(n int32) []byte      { return cat([]byte{0x71}, u32(uint32(n))) }
func smallint(n int8) []byte   { return []byte{0x54, byte(n)} }
func smalllong(n int8) []byte  { return []byte{0x55, byte(n)} }
func vdouble(n uint64) []byte  { return cat([]byte{0x82}, u64(n)) }
func timestamp(ms int64) []byte {
	return cat([]byte{0x83}, u64(uint64(ms)))
}
func uuid(b byte) []byte { return cat([]byte{0x98}, make([]byte, 15), []byte{b}) }

func list8(elems ...[]byte) []byte {
	body := cat(elems...)
	return cat([]byte{0xc0, byte(len(body) + 1), byte(len(elems))}, body)
}

func list32(elems ...[]byte) []byte {
	body := cat(elems...)
	return cat([]byte{0xd0}, u32(uint32(len(body)+4)), u32(uint32(len(elems))), body)
}

func map8(kvs ...[]byte) []byte {
	body := cat(kvs...)
	return cat([]byte{0xc1, byte(len(body) + 1), byte(len(kvs))}, body)
}

func map32(kvs ...[]byte) []byte {
	body := cat(kvs...)
	return cat([]byte{0xd1}, u32(uint32(len(body)+4)), u32(uint32(len(kvs))), body)
}

// array8 is an array of n elements of constructor c whose encodings
// (without constructor) are body.
func array8(c byte, n int, body []byte) []byte {
	return cat([]byte{0xe0, byte(len(body) + 2), byte(n), c}, body)
}

func array32(c byte, n int, body []byte) []byte {
	return cat([]byte{0xf0}, u32(uint32(len(body)+5)), u32(uint32(n)), []byte{c}, body)
}

// symArray8 is an array8 of sym8, as Proton and rhea send capabilities.
func symArray8(ss ...string) []byte {
	var body []byte
	for _, s := range ss {
		body = cat(body, []byte{byte(len(s))}, []byte(s))
	}
	return array8(0xa3, len(ss), body)
}

// nestedMaps is an amqp-value section holding n maps, each the value of
// the one outside it under the key "a": built front to back, in a loop.
func nestedMaps(n int) []byte {
	const level = 12 // map32 header (9) + key str8 "a" (3)
	out := make([]byte, 0, 3+level*(n-1)+3)
	out = append(out, 0x00, 0x53, 0x77)
	for i := 0; i < n-1; i++ {
		total := level*(n-1-i) + 3
		out = append(out, 0xd1)
		out = binary.BigEndian.AppendUint32(out, uint32(total-5))
		out = binary.BigEndian.AppendUint32(out, 2)
		out = append(out, 0xa1, 0x01, 'a')
	}
	return append(out, 0xc1, 0x01, 0x00)
}

// mustMarshal encodes m with go-amqp's own encoder.
func mustMarshal(m *amqp.Message) []byte {
	b, err := m.MarshalBinary()
	if err != nil {
		panic(fmt.Sprintf("marshal: %v", err))
	}
	return b
}

// decode runs go-amqp's decoder on payload and reports whether it
// panicked, and its error.
func decode(payload []byte) (panicked any, err error) {
	defer func() { panicked = recover() }()
	var m amqp.Message
	err = m.UnmarshalBinary(payload)
	return nil, err
}
