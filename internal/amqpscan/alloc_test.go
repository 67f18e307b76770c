package amqpscan

import (
	"bytes"
	"runtime"
	"testing"
)

// maxAmplification bounds what go-amqp allocates decoding a payload Check
// passes, as a multiple of the payload's size. Every element costs at least
// one byte on the wire, so its allocation is a constant factor: the worst
// shapes measured (a list of described nulls, of empty maps, a map of
// one-byte keys) come to 20-27 times; the bound leaves room for Go's
// allocator to change.
const maxAmplification = 48

// TestDecodeAllocationBounded measures go-amqp's allocation on the
// cheapest-per-element shapes Check passes, about 60 KiB each.
func TestDecodeAllocationBounded(t *testing.T) {
	const n = 30000
	repeat := func(b []byte, k int) []byte { return bytes.Repeat(b, k) }
	var keys []byte
	for i := range n / 2 {
		keys = append(keys, 0x70, 0, 0, byte(i>>8), byte(i), 0x40)
	}
	shapes := []sample{
		{"list of nulls", sec(0x77, list32Raw(repeat(null, n), n))},
		{"list of empty lists", sec(0x77, list32Raw(repeat(list0, n), n))},
		{"list of empty map8s", sec(0x77, list32Raw(repeat([]byte{0xc1, 1, 0}, n/3), n/3))},
		{"list of empty array8s", sec(0x77, list32Raw(repeat([]byte{0xe0, 2, 0, 0x43}, n/4), n/4))},
		{"list of described nulls", sec(0x77, list32Raw(repeat([]byte{0x00, 0x44, 0x40}, n/3), n/3))},
		{"list of timestamps", sec(0x77, list32Raw(repeat(timestamp(1), n/9), n/9))},
		{"list of uuids", sec(0x77, list32Raw(repeat(uuid(1), n/17), n/17))},
		{"list of one-byte strings", sec(0x77, list32Raw(repeat(str8("a"), n/3), n/3))},
		{"map of distinct uint keys", sec(0x77, map32Raw(keys, n))},
		{"array of timestamps", sec(0x77, array32(0x83, n/8, make([]byte, n/8*8)))},
		{"array of one-byte binaries", sec(0x77, array32(0xa0, n/2, repeat([]byte{1, 'b'}, n/2)))},
		{"list of empty binaries", sec(0x77, list32Raw(repeat([]byte{0xa0, 0}, n/2), n/2))},
		{"list of described symbols", sec(0x77, list32Raw(repeat([]byte{0x00, 0xa3, 0, 0x40}, n/4), n/4))},
		{"app-properties of one-byte keys", sec(0x74, map32Raw(repeat([]byte{0xa1, 1, 'k', 0x40}, n/4), n/2))},
	}
	for _, c := range shapes {
		if err := Check(c.payload, Limits{}); err != nil {
			t.Fatalf("%s: Check: %v", c.name, err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		if p, err := decode(c.payload); p != nil || err != nil {
			t.Fatalf("%s: go-amqp: panic %v, error %v", c.name, p, err)
		}
		runtime.ReadMemStats(&after)
		ratio := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(c.payload))
		t.Logf("%s: %d bytes decode with %.1fx their size allocated", c.name, len(c.payload), ratio)
		if ratio > maxAmplification {
			t.Errorf("%s: go-amqp allocates %.1fx the payload's size", c.name, ratio)
		}
	}
}

// map32Raw is a map32 of count elements (keys and values) already encoded.
func map32Raw(body []byte, count int) []byte {
	return cat([]byte{0xd1}, u32(uint32(len(body)+4)), u32(uint32(count)), body)
}

// list32Raw is a list32 of count elements already encoded.
func list32Raw(body []byte, count int) []byte {
	return cat([]byte{0xd0}, u32(uint32(len(body)+4)), u32(uint32(count)), body)
}
