package amqpwire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The guard decodes as little as it needs of a performative, and of a
// transfer exactly what go-amqp does: go-amqp takes a transfer's payload to
// be whatever follows the last field it decoded, so the guard walks the same
// fields, accepting only the encodings each field may have, and requires the
// list's declared size to end where the fields do. A transfer it cannot walk
// so ends the connection, where go-amqp would most often end it too.

// transferFields is what the guard needs of a transfer performative.
type transferFields struct {
	handle  uint32
	more    bool
	aborted bool
	end     int // where the payload starts, from the list's constructor
}

var errNoHandle = errors.New("no handle")

// parseTransfer walks the field list of a transfer; b starts at the list's
// constructor (after 0x00 0x53 0x14).
func parseTransfer(b []byte) (transferFields, error) {
	var t transferFields
	if len(b) < 1 {
		return t, errors.New("no field list")
	}
	var pos, end int
	var count uint32
	switch b[0] {
	case 0x45: // list0
		return t, errNoHandle
	case 0xc0:
		if len(b) < 3 {
			return t, errors.New("truncated list8 header")
		}
		end = 2 + int(b[1])
		count = uint32(b[2])
		pos = 3
	case 0xd0:
		if len(b) < 9 {
			return t, errors.New("truncated list32 header")
		}
		size := binary.BigEndian.Uint32(b[1:])
		if uint64(size) > uint64(len(b)) {
			return t, fmt.Errorf("list size %d beyond the frame", size)
		}
		end = 5 + int(size)
		count = binary.BigEndian.Uint32(b[5:])
		pos = 9
	default:
		return t, fmt.Errorf("field list with constructor 0x%02x", b[0])
	}
	if end > len(b) || end < pos {
		return t, fmt.Errorf("list size does not fit the frame")
	}
	if count > 11 {
		return t, fmt.Errorf("%d fields (a transfer has 11)", count)
	}
	if count == 0 {
		return t, errNoHandle
	}
	for i := 0; i < int(count); i++ {
		if pos >= end {
			return t, fmt.Errorf("field %d beyond the list", i)
		}
		code := b[pos]
		pos++
		if code == 0x40 { // null
			if i == 0 {
				return t, errNoHandle
			}
			continue
		}
		var width int
		switch i {
		case 0, 1, 3: // handle, delivery-id, message-format: uint
			switch code {
			case 0x43:
				width = 0
			case 0x50, 0x52:
				width = 1
			case 0x60:
				width = 2
			case 0x70:
				width = 4
			default:
				return t, fmt.Errorf("field %d with constructor 0x%02x (want a uint)", i, code)
			}
			if i == 0 {
				if pos+width > end {
					return t, fmt.Errorf("field %d beyond the list", i)
				}
				switch width {
				case 1:
					t.handle = uint32(b[pos])
				case 2:
					t.handle = uint32(binary.BigEndian.Uint16(b[pos:]))
				case 4:
					t.handle = binary.BigEndian.Uint32(b[pos:])
				}
			}
		case 2: // delivery-tag: binary
			switch code {
			case 0xa0:
				if pos >= end {
					return t, fmt.Errorf("field %d beyond the list", i)
				}
				width = 1 + int(b[pos])
			case 0xb0:
				if pos+4 > end {
					return t, fmt.Errorf("field %d beyond the list", i)
				}
				n := binary.BigEndian.Uint32(b[pos:])
				if uint64(n) > uint64(end-pos-4) {
					return t, fmt.Errorf("field %d beyond the list", i)
				}
				width = 4 + int(n)
			default:
				return t, fmt.Errorf("field %d with constructor 0x%02x (want a binary)", i, code)
			}
		case 6: // rcv-settle-mode: ubyte
			if code != 0x50 {
				return t, fmt.Errorf("field %d with constructor 0x%02x (want a ubyte)", i, code)
			}
			width = 1
		case 7: // state
			// go-amqp ignores a received transfer's state (it has no
			// resume); a state would be a nested value whose extent only
			// a full decode agrees on.
			return t, errors.New("a transfer with a delivery state (resuming deliveries is not supported)")
		default: // settled, more, resume, aborted, batchable: boolean
			var v bool
			switch code {
			case 0x41:
				v = true
			case 0x42:
			case 0x56:
				if pos >= end {
					return t, fmt.Errorf("field %d beyond the list", i)
				}
				v = b[pos] != 0
				width = 1
			default:
				return t, fmt.Errorf("field %d with constructor 0x%02x (want a boolean)", i, code)
			}
			switch i {
			case 5:
				t.more = v
			case 9:
				t.aborted = v
			}
		}
		pos += width
		if pos > end {
			return t, fmt.Errorf("field %d beyond the list", i)
		}
	}
	if pos != end {
		return t, fmt.Errorf("the list declares %d bytes its fields do not take", end-pos)
	}
	t.end = end
	return t, nil
}

// firstUint decodes the first field of a performative's list as a uint (the
// handle of a detach); b starts at the list's constructor.
func firstUint(b []byte) (uint32, bool) {
	pos, _, count, ok := listHeader(b)
	if !ok || count == 0 {
		return 0, false
	}
	v, _, ok := uintAt(b, pos)
	return v, ok
}

// listHeader reads the header of the list8 or list32 that b starts with:
// where its first field starts, where its size says it ends (which the
// caller checks against b) and how many fields it has. ok is false for any
// other constructor or a header cut short.
func listHeader(b []byte) (pos, end int, count uint32, ok bool) {
	switch {
	case len(b) >= 3 && b[0] == 0xc0:
		return 3, 2 + int(b[1]), uint32(b[2]), true
	case len(b) >= 9 && b[0] == 0xd0:
		return 9, 5 + int(binary.BigEndian.Uint32(b[1:])), binary.BigEndian.Uint32(b[5:]), true
	}
	return 0, 0, 0, false
}

// skipFields returns where the n values from b[pos:] end, or -1 as skip.
func skipFields(b []byte, pos, n int) int {
	for i := 0; i < n && pos >= 0; i++ {
		pos = skip(b, pos)
	}
	return pos
}

// skip returns where the value at b[pos:] ends, or -1 when it does not fit
// or its constructor is unknown. Described values are followed without
// recursion.
func skip(b []byte, pos int) int {
	for pending := 1; pending > 0; pending-- {
		if pos >= len(b) {
			return -1
		}
		code := b[pos]
		pos++
		if code == 0x00 {
			pending += 2 // the descriptor and the value
			continue
		}
		n := width(b, pos, code)
		if n < 0 {
			return -1
		}
		pos += n
	}
	return pos
}

// width is how many bytes the body of a value with constructor code takes
// at b[pos:]: -1 when it does not fit, -2 for an unknown constructor (or a
// described one, which has no body of its own).
func width(b []byte, pos int, code byte) int {
	var n int
	switch {
	case code >= 0x40 && code <= 0x45, code >= 0x50 && code <= 0x56, code == 0x60 || code == 0x61,
		code >= 0x70 && code <= 0x74, code >= 0x80 && code <= 0x84, code == 0x94 || code == 0x98:
		// A fixed-width constructor's subcategory, its high nibble, is its width.
		n = [...]int{0, 1, 2, 4, 8, 16}[code>>4-4]
	case code == 0xa0 || code == 0xa1 || code == 0xa3 || code == 0xc0 || code == 0xc1 || code == 0xe0:
		if pos >= len(b) {
			return -1
		}
		n = 1 + int(b[pos])
	case code == 0xb0 || code == 0xb1 || code == 0xb3 || code == 0xd0 || code == 0xd1 || code == 0xf0:
		if pos+4 > len(b) {
			return -1
		}
		size := binary.BigEndian.Uint32(b[pos:])
		if uint64(size) > uint64(len(b)-pos-4) {
			return -1
		}
		n = 4 + int(size)
	default:
		return -2
	}
	if n > len(b)-pos {
		return -1
	}
	return n
}

// openChannelMax reads the channel-max of an open performative's field list
// b; absent or null means the default, 65535. ok is false when the guard
// cannot follow the fields.
func openChannelMax(b []byte) (max uint16, ok bool) {
	if len(b) >= 1 && b[0] == 0x45 {
		return 65535, true // list0: every field absent
	}
	pos, end, count, ok := listHeader(b)
	if !ok || end > len(b) {
		return 0, false
	}
	if count < 4 {
		return 65535, true
	}
	b = b[:end]
	if pos = skipFields(b, pos, 3); pos < 0 {
		return 0, false
	}
	switch {
	case pos < len(b) && b[pos] == 0x40:
		return 65535, true
	case pos+3 <= len(b) && b[pos] == 0x60:
		return binary.BigEndian.Uint16(b[pos+1:]), true
	}
	return 0, false
}

// offeredCapabilities decodes field 7 of an open performative (a symbol or
// an array of symbols); b starts at the list's constructor.
func offeredCapabilities(b []byte) []string {
	pos, end, count, ok := listHeader(b)
	if !ok || end > len(b) || count < 8 {
		return nil
	}
	b = b[:end]
	if pos = skipFields(b, pos, 7); pos < 0 {
		return nil
	}
	if pos >= len(b) {
		return nil
	}
	code := b[pos]
	pos++
	switch code {
	case 0xa3, 0xb3:
		s, _, ok := symbolAt(b, pos, code)
		if !ok {
			return nil
		}
		return []string{s}
	case 0xe0, 0xf0:
		var n uint32
		if code == 0xe0 {
			if pos+2 > len(b) {
				return nil
			}
			n, pos = uint32(b[pos+1]), pos+2
		} else {
			if pos+8 > len(b) {
				return nil
			}
			n, pos = binary.BigEndian.Uint32(b[pos+4:]), pos+8
		}
		if pos >= len(b) {
			return nil
		}
		elem := b[pos]
		pos++
		if elem != 0xa3 && elem != 0xb3 {
			return nil
		}
		var caps []string
		for j := uint32(0); j < n; j++ {
			s, next, ok := symbolAt(b, pos, elem)
			if !ok {
				return nil
			}
			caps = append(caps, s)
			pos = next
		}
		return caps
	}
	return nil
}

// symbolAt decodes the symbol body at b[pos:] for constructor code.
func symbolAt(b []byte, pos int, code byte) (string, int, bool) {
	var n int
	if code == 0xa3 {
		if pos >= len(b) {
			return "", 0, false
		}
		n, pos = int(b[pos]), pos+1
	} else {
		if pos+4 > len(b) {
			return "", 0, false
		}
		size := binary.BigEndian.Uint32(b[pos:])
		if uint64(size) > uint64(len(b)-pos-4) {
			return "", 0, false
		}
		n, pos = int(size), pos+4
	}
	if n > len(b)-pos {
		return "", 0, false
	}
	return string(b[pos : pos+n]), pos + n, true
}

// maxPerformativeDepth bounds the nesting the guard follows in a
// performative other than a transfer. No performative a broker sends nests
// more than a few levels (a source's filter map of described values).
const maxPerformativeDepth = 64

// keyWalker follows every value of a performative other than a transfer and
// refuses a map key go-amqp would panic on: go-amqp decodes the annotations
// of a modified delivery state, and any map held in an `any` field
// (properties, error info), into a Go map keyed by interface values, where
// a list, map, array, binary or described key is unhashable (the panic of
// Azure/go-amqp#369, in go-amqp's reader goroutine, beyond any recover).
// The payload of a transfer is the scanner's; this is the same rule for the
// frames around it, which are small (at most a frame), so nesting depth is no
// danger to go-amqp there.
type keyWalker struct {
	b []byte
}

func unhashableKey(code byte) bool {
	switch code {
	case 0x00, 0x45, 0xc0, 0xd0, 0xc1, 0xd1, 0xe0, 0xf0, 0xa0, 0xb0:
		return true
	}
	return false
}

var errTruncated = errors.New("truncated value")

// value follows the value at pos; binaryKeys allows binary keys in the map
// at pos itself (an attach's unsettled map is keyed by delivery-tags, which
// go-amqp decodes into a map of strings).
func (w *keyWalker) value(pos, depth int, binaryKeys bool) (int, error) {
	if pos >= len(w.b) {
		return 0, errTruncated
	}
	code := w.b[pos]
	pos++
	if code == 0x00 {
		if depth >= maxPerformativeDepth {
			return 0, fmt.Errorf("nested deeper than %d", maxPerformativeDepth)
		}
		p, err := w.value(pos, depth+1, false)
		if err != nil {
			return 0, err
		}
		return w.value(p, depth+1, false)
	}
	return w.body(code, pos, depth, binaryKeys)
}

// body follows the value whose constructor code was just read; pos is where
// its bytes start.
func (w *keyWalker) body(code byte, pos, depth int, binaryKeys bool) (int, error) {
	b := w.b
	switch code {
	case 0xc0, 0xc1, 0xe0, 0xd0, 0xd1, 0xf0:
	default:
		switch n := width(b, pos, code); n {
		case -1:
			return 0, errTruncated
		case -2:
			return 0, fmt.Errorf("unknown constructor 0x%02x", code)
		default:
			return pos + n, nil
		}
	}
	if depth >= maxPerformativeDepth {
		return 0, fmt.Errorf("nested deeper than %d", maxPerformativeDepth)
	}
	var end, p int
	var count uint32
	if code == 0xc0 || code == 0xc1 || code == 0xe0 {
		if pos+2 > len(b) {
			return 0, errTruncated
		}
		end, count, p = pos+1+int(b[pos]), uint32(b[pos+1]), pos+2
	} else {
		if pos+8 > len(b) {
			return 0, errTruncated
		}
		size := binary.BigEndian.Uint32(b[pos:])
		if uint64(size) > uint64(len(b)-pos-4) {
			return 0, errTruncated
		}
		end, count, p = pos+4+int(size), binary.BigEndian.Uint32(b[pos+4:]), pos+8
	}
	if end > len(b) || p > end {
		return 0, errTruncated
	}
	inner := keyWalker{b: b[:end]}
	var err error
	switch code {
	case 0xc0, 0xd0: // list
		for i := uint32(0); i < count; i++ {
			if p, err = inner.value(p, depth+1, false); err != nil {
				return 0, err
			}
		}
	case 0xc1, 0xd1: // map
		for i := uint32(0); i < count; i++ {
			if i%2 == 0 && p < end && unhashableKey(b[p]) && !(binaryKeys && (b[p] == 0xa0 || b[p] == 0xb0)) {
				return 0, fmt.Errorf("a map key of type 0x%02x", b[p])
			}
			if p, err = inner.value(p, depth+1, false); err != nil {
				return 0, err
			}
		}
	default: // array: one constructor, then the elements' bodies
		if p >= end {
			if count == 0 {
				return end, nil
			}
			return 0, errTruncated
		}
		elem := b[p]
		p++
		if elem == 0x00 {
			if p, err = inner.value(p, depth+1, false); err != nil {
				return 0, err
			}
			if p >= end {
				return 0, errTruncated
			}
			elem = b[p]
			p++
		}
		if elem >= 0x40 && elem <= 0x45 {
			return end, nil // elements of no width
		}
		for i := uint32(0); i < count; i++ {
			if p, err = inner.body(elem, p, depth+1, false); err != nil {
				return 0, err
			}
		}
	}
	return end, nil
}

// checkPerformative walks a performative other than a transfer; body starts
// at its descriptor (0x00 0x53 code).
func checkPerformative(body []byte) error {
	w := keyWalker{b: body}
	if len(body) < 4 {
		return errTruncated
	}
	if body[2] != 0x12 {
		_, err := w.value(0, 0, false)
		return err
	}
	// attach: walk the list by hand to let its unsettled map (field 7)
	// have binary keys.
	code := body[3]
	if code == 0x45 {
		return nil
	}
	if code != 0xc0 && code != 0xd0 {
		return fmt.Errorf("field list with constructor 0x%02x", code)
	}
	p, e, count, ok := listHeader(body[3:])
	if !ok {
		return errTruncated
	}
	pos, end := 3+p, 3+e
	if end > len(body) || end < pos {
		return errTruncated
	}
	w.b = body[:end]
	var err error
	for i := uint32(0); i < count; i++ {
		if pos, err = w.value(pos, 1, i == 7); err != nil {
			return err
		}
	}
	return nil
}

// dispositionRange decodes first and last of a disposition (fields 1 and 2;
// last defaults to first); b starts at the list's constructor. checkPerformative
// has walked the frame already, so only the encodings go-amqp accepts for a
// uint are taken: anything else is go-amqp's to refuse.
func dispositionRange(b []byte) (first, last uint32, ok bool) {
	pos, end, count, ok := listHeader(b)
	if !ok || end > len(b) || count < 2 {
		return 0, 0, false
	}
	b = b[:end]
	if pos = skip(b, pos); pos < 0 {
		return 0, 0, false
	}
	first, pos, ok = uintAt(b, pos)
	if !ok {
		return 0, 0, false
	}
	last = first
	if count >= 3 && pos < len(b) && b[pos] != 0x40 {
		if last, _, ok = uintAt(b, pos); !ok {
			return 0, 0, false
		}
	}
	return first, last, true
}

// uintAt decodes the uint at b[pos:] and says where it ends.
func uintAt(b []byte, pos int) (uint32, int, bool) {
	if pos >= len(b) {
		return 0, 0, false
	}
	code, v := b[pos], b[pos+1:]
	switch {
	case code == 0x43:
		return 0, pos + 1, true
	case (code == 0x52 || code == 0x50) && len(v) >= 1:
		return uint32(v[0]), pos + 2, true
	case code == 0x60 && len(v) >= 2:
		return uint32(binary.BigEndian.Uint16(v)), pos + 3, true
	case code == 0x70 && len(v) >= 4:
		return binary.BigEndian.Uint32(v), pos + 5, true
	}
	return 0, 0, false
}
