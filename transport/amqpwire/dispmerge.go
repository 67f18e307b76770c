package amqpwire

import (
	"bytes"
	"encoding/binary"
)

// go-amqp's Receiver settles one delivery per call and writes one
// disposition frame for each, so a consumer makes the broker parse a
// disposition per message. A disposition names a range of delivery-ids
// (first..last) and means exactly the same as one disposition per id of
// the range with the same role, settled flag and state. The coalescer
// therefore folds a disposition into the one just before it in the
// pending bytes when nothing was written between them, both are on the
// same channel (session) with the same role and byte-identical settled,
// state and batchable fields, and the new range starts where the old one
// ends. Only go-amqp's encoding of a disposition (and the one written
// here) is folded; any other frame, or a disposition with anything
// unexpected, passes through as written.

// dispFrame locates the parts of one disposition frame.
type dispFrame struct {
	channel     uint16
	role        bool
	first, last uint32
	tail        int // where the fields after last start, in the frame
	tailFields  int // how many fields follow last
}

// maxFolded bounds the range one disposition covers: a broker takes the
// range apart into deliveries, and a range as long as a credit window is
// where the gain ends anyway.
const maxFolded = 1 << 16

// parseDisposition reads p as one whole disposition frame; ok is false
// for anything else.
func parseDisposition(p []byte) (d dispFrame, ok bool) {
	// Frame header: size, doff 2, type 0 (AMQP), channel; then the
	// descriptor 0x00 0x53 0x15.
	if len(p) < 8+3+3 || binary.BigEndian.Uint32(p) != uint32(len(p)) || p[4] != 2 || p[5] != 0 ||
		p[8] != 0x00 || p[9] != 0x53 || p[10] != 0x15 {
		return d, false
	}
	d.channel = binary.BigEndian.Uint16(p[6:])
	var pos, end int
	var count uint32
	switch p[11] {
	case 0xc0:
		end, count, pos = 13+int(p[12]), uint32(p[13]), 14
	case 0xd0:
		if len(p) < 20 {
			return d, false
		}
		size := binary.BigEndian.Uint32(p[12:])
		if uint64(size) != uint64(len(p)-16) {
			return d, false
		}
		end, count, pos = len(p), binary.BigEndian.Uint32(p[16:]), 20
	default:
		return d, false
	}
	// The list must end where the frame does (a disposition has no
	// payload), and hold role and first, at most all six fields.
	if end != len(p) || count < 2 || count > 6 || pos >= end {
		return d, false
	}
	switch {
	case p[pos] == 0x41:
		d.role, pos = true, pos+1
	case p[pos] == 0x42:
		pos++
	case p[pos] == 0x56 && pos+1 < end && p[pos+1] <= 1:
		d.role, pos = p[pos+1] == 1, pos+2
	default:
		return d, false
	}
	var null bool
	if d.first, null, pos = dispUint(p, pos, end); pos < 0 || null {
		return d, false
	}
	d.last = d.first
	if count >= 3 {
		var last uint32
		if last, null, pos = dispUint(p, pos, end); pos < 0 {
			return d, false
		}
		if !null {
			d.last = last
		}
	}
	if d.last < d.first || d.last-d.first >= maxFolded {
		return d, false
	}
	d.tail = pos
	for i := 3; i < int(count); i++ {
		if pos = skip(p[:end], pos); pos < 0 {
			return d, false
		}
		d.tailFields++
	}
	return d, pos == end
}

// dispUint reads a uint field (or null) at p[pos:end]; pos is -1 when the
// field is anything else.
func dispUint(p []byte, pos, end int) (v uint32, null bool, next int) {
	if pos >= end {
		return 0, false, -1
	}
	switch p[pos] {
	case 0x40:
		return 0, true, pos + 1
	case 0x43:
		return 0, false, pos + 1
	case 0x52:
		if pos+2 <= end {
			return uint32(p[pos+1]), false, pos + 2
		}
	case 0x70:
		if pos+5 <= end {
			return binary.BigEndian.Uint32(p[pos+1:]), false, pos + 5
		}
	}
	return 0, false, -1
}

// canFold reports whether next may be folded into prev, the disposition
// frame pf just before it.
func canFold(prev dispFrame, pf []byte, next dispFrame, nf []byte) bool {
	return prev.channel == next.channel && prev.role == next.role &&
		prev.last != ^uint32(0) && next.first == prev.last+1 &&
		next.last-prev.first < maxFolded &&
		prev.tailFields == next.tailFields && bytes.Equal(pf[prev.tail:], nf[next.tail:])
}

// appendDisposition appends a disposition frame on channel with role,
// first..last and the given fields after last (tailFields of them,
// encoded as tail), and returns where tail starts in the frame.
func appendDisposition(b []byte, channel uint16, role bool, first, last uint32, tail []byte, tailFields int) ([]byte, int) {
	start := len(b)
	b = append(b, 0, 0, 0, 0, 2, 0, byte(channel>>8), byte(channel))
	b = append(b, 0x00, 0x53, 0x15, 0xc0, 0, byte(3+tailFields))
	if role {
		b = append(b, 0x41)
	} else {
		b = append(b, 0x42)
	}
	b = appendUint(b, first)
	b = appendUint(b, last)
	tailAt := len(b) - start
	b = append(b, tail...)
	listSize := len(b) - start - 13 // after the list's size byte
	if listSize > 255 {
		// Too long for a list8: the same fields in a list32.
		b = b[:start]
		b = append(b, 0, 0, 0, 0, 2, 0, byte(channel>>8), byte(channel))
		b = append(b, 0x00, 0x53, 0x15, 0xd0, 0, 0, 0, 0, 0, 0, 0, byte(3+tailFields))
		if role {
			b = append(b, 0x41)
		} else {
			b = append(b, 0x42)
		}
		b = appendUint(b, first)
		b = appendUint(b, last)
		tailAt = len(b) - start
		b = append(b, tail...)
		binary.BigEndian.PutUint32(b[start+12:], uint32(len(b)-start-16))
	} else {
		b[start+12] = byte(listSize)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start))
	return b, tailAt
}

func appendUint(b []byte, v uint32) []byte {
	switch {
	case v == 0:
		return append(b, 0x43)
	case v < 256:
		return append(b, 0x52, byte(v))
	}
	return append(b, 0x70, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}
