package amqpwire

import (
	"bytes"
	"encoding/binary"
	"time"
)

// go-amqp's Receiver settles one delivery per call and writes one
// disposition frame for each, so a consumer makes the broker parse a
// disposition per message. A disposition names a range of delivery-ids
// (first..last) and means exactly the same as one disposition per id of
// the range with the same role, settled flag and state. The coalescer
// (transport/internal/coalesce) therefore has folds, its Folder here, fold a disposition into an earlier one of the same session
// (channel) in the pending bytes when both have the same role and
// byte-identical settled, state and batchable fields, and the new range
// starts where the old one ends.
//
// Frames of one session never change order: any other frame of that
// session between the two keeps them apart. Frames of other sessions may
// lie between, but only transfers, flows and empty frames: those concern
// their own session alone, and sessions are independent, so settling a
// delivery of one session before a transfer of another, written in the
// same flush, asks the same of the peer. Anything else (attach, detach,
// begin, end, close, SASL, a protocol header, bytes not understood) ends
// every fold. Only go-amqp's encoding of a disposition (and the one
// written here) is folded; any other frame passes through as written.
//
// A flush would end every range, and the flusher writes as soon as it
// wakes, so a session's last disposition that may still grow is held back
// instead (Take): it becomes the start of the next pending bytes, where
// the next dispositions of its session fold into it. Held, it only moves
// later past frames of other sessions, as a fold moves a disposition
// earlier past them. It goes out with the first flush after a frame that
// ends its fold (any frame of its session, a disposition that cannot join
// it, anything that is not session-local), once it can no longer grow,
// once holdFor has passed since it was first held, and on Close. Only a
// settled disposition with no state or an outcome (holdableTail) that
// covers two deliveries or more is held (Take).

// dispositionHold is how long the writer of a go-amqp connection holds back
// a disposition that may still grow (the coalescer's holdFor). A
// millisecond is tens of deliveries under load and nothing a person or a
// timeout notices; the settlement of a delivery is not awaited by anyone
// once written.
const dispositionHold = time.Millisecond

// maxFoldSessions bounds the sessions whose last disposition is kept as a
// place to fold into: past it, a session's dispositions are written as
// they come.
const maxFoldSessions = 8

// foldAt is a disposition in the pending bytes that later ones of its
// session may fold into.
type foldAt struct {
	at, size int // where its frame is in the pending bytes
	lastAt   int // where its last field's four bytes are in the frame; 0 until it is rewritten wide
	f        dispFrame
}

// folds is the coalescer's place to fold into, per session: its Folder for
// go-amqp's stream, one AMQP 1.0 frame per Write. Only the coalescer's lock
// holder touches it, and a flush empties it.
type folds struct {
	n       int
	at      [maxFoldSessions]foldAt
	scratch []byte // a rewritten disposition, reused
}

// Fold folds p into the pending bytes buf and reports true when p is a
// disposition that folds; otherwise it notes what p means for later folds
// and reports false, and the coalescer appends p.
func (fs *folds) Fold(buf, p []byte) ([]byte, bool) {
	d, ok := parseDisposition(p)
	if !ok {
		if ch, local := sessionLocal(p); local {
			fs.drop(ch)
		} else {
			fs.n = 0
		}
		return buf, false
	}
	i := fs.find(d.channel)
	if i < 0 {
		if fs.n < maxFoldSessions {
			fs.at[fs.n] = foldAt{at: len(buf), size: len(p), f: d}
			fs.n++
		}
		return buf, false
	}
	k := &fs.at[i]
	if !canFold(k.f, buf[k.at:k.at+k.size], d, p) {
		// A new run on its session, which this one can no longer join.
		*k = foldAt{at: len(buf), size: len(p), f: d}
		return buf, false
	}
	if k.lastAt == 0 {
		buf = fs.widen(buf, k)
	}
	binary.BigEndian.PutUint32(buf[k.at+k.lastAt:], d.last)
	k.f.last = d.last
	return buf, true
}

// widen rewrites k's frame in buf with its first and last as four-byte
// uints, so that every later fold only patches last in place; the bytes
// after it move by the difference in length.
func (fs *folds) widen(buf []byte, k *foldAt) []byte {
	old := buf[k.at : k.at+k.size]
	var tailAt, lastAt int
	fs.scratch, tailAt, lastAt = appendDisposition(fs.scratch[:0], k.f.channel, k.f.role, k.f.first, k.f.last,
		old[k.f.tail:], k.f.tailFields, true)
	wide := fs.scratch
	delta := len(wide) - k.size
	end, n := k.at+k.size, len(buf)
	if delta > 0 {
		buf = append(buf, wide[:delta]...) // room; overwritten below
	}
	copy(buf[end+delta:], buf[end:n])
	buf = buf[:n+delta]
	copy(buf[k.at:], wide)
	for j := range fs.n {
		if o := &fs.at[j]; o.at > k.at {
			o.at += delta
		}
	}
	k.size, k.f.tail, k.lastAt = len(wide), tailAt, lastAt
	return buf
}

func (fs *folds) find(ch uint16) int {
	for i := range fs.n {
		if fs.at[i].f.channel == ch {
			return i
		}
	}
	return -1
}

func (fs *folds) drop(ch uint16) {
	if i := fs.find(ch); i >= 0 {
		fs.n--
		fs.at[i] = fs.at[fs.n]
	}
}

// sessionLocal reports the channel of a whole AMQP frame that concerns its
// session alone: a transfer, a flow or an empty frame.
func sessionLocal(p []byte) (uint16, bool) {
	if len(p) < 8 || binary.BigEndian.Uint32(p) != uint32(len(p)) || p[5] != 0 {
		return 0, false
	}
	ch, body := binary.BigEndian.Uint16(p[6:]), int(p[4])*4
	switch {
	case body < 8 || body > len(p):
		return 0, false
	case body == len(p):
		return ch, true
	case len(p) >= body+3 && p[body] == 0x00 && p[body+1] == 0x53 && (p[body+2] == 0x13 || p[body+2] == 0x14):
		return ch, true
	}
	return 0, false
}

// dispFrame locates the parts of one disposition frame.
type dispFrame struct {
	channel     uint16
	role        bool
	first, last uint32
	tail        int  // where the fields after last start, in the frame
	tailFields  int  // how many fields follow last
	holdable    bool // settled, and its state is none or an outcome (holding, below)
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
	d.holdable = holdableTail(p[d.tail:end], d.tailFields)
	return d, pos == end
}

// holdableTail reports whether a disposition whose fields after last are
// tail (n of them) may be held back: it is settled, so nobody waits for the
// peer's answer, and its state is none or an outcome (accepted, rejected,
// released, modified). A transactional state is never held: its settlement
// must reach the peer before the discharge the application writes next,
// which may be on another session.
func holdableTail(tail []byte, n int) bool {
	if n < 1 || len(tail) == 0 {
		return false
	}
	var pos int
	switch {
	case tail[0] == 0x41:
		pos = 1
	case tail[0] == 0x56 && len(tail) > 1 && tail[1] == 1:
		pos = 2
	default:
		return false
	}
	if n < 2 || tail[pos] == 0x40 {
		return true
	}
	return len(tail) >= pos+3 && tail[pos] == 0x00 && tail[pos+1] == 0x53 && tail[pos+2] >= 0x24 && tail[pos+2] <= 0x27
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

// canFold reports whether next may be folded into prev, the earlier
// disposition frame pf of its session.
func canFold(prev dispFrame, pf []byte, next dispFrame, nf []byte) bool {
	return prev.channel == next.channel && prev.role == next.role &&
		prev.last != ^uint32(0) && next.first == prev.last+1 &&
		next.last-prev.first < maxFolded &&
		prev.tailFields == next.tailFields && bytes.Equal(pf[prev.tail:], nf[next.tail:])
}

// appendDisposition appends a disposition frame on channel with role,
// first..last and the given fields after last (tailFields of them,
// encoded as tail), and returns where tail and last start in the frame.
// wide writes first and last as four-byte uints, whatever their value.
func appendDisposition(b []byte, channel uint16, role bool, first, last uint32, tail []byte, tailFields int, wide bool) ([]byte, int, int) {
	start := len(b)
	body := func(list32 bool) (int, int) {
		b = append(b, 0, 0, 0, 0, 2, 0, byte(channel>>8), byte(channel))
		if list32 {
			b = append(b, 0x00, 0x53, 0x15, 0xd0, 0, 0, 0, 0, 0, 0, 0, byte(3+tailFields))
		} else {
			b = append(b, 0x00, 0x53, 0x15, 0xc0, 0, byte(3+tailFields))
		}
		if role {
			b = append(b, 0x41)
		} else {
			b = append(b, 0x42)
		}
		b = appendUint(b, first, wide)
		lastAt := len(b) - start + 1
		b = appendUint(b, last, wide)
		tailAt := len(b) - start
		b = append(b, tail...)
		return tailAt, lastAt
	}
	tailAt, lastAt := body(false)
	if listSize := len(b) - start - 13; listSize <= 255 { // after the list's size byte
		b[start+12] = byte(listSize)
	} else {
		// Too long for a list8: the same fields in a list32.
		b = b[:start]
		tailAt, lastAt = body(true)
		binary.BigEndian.PutUint32(b[start+12:], uint32(len(b)-start-16))
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start))
	return b, tailAt, lastAt
}

func appendUint(b []byte, v uint32, wide bool) []byte {
	switch {
	case wide:
	case v == 0:
		return append(b, 0x43)
	case v < 256:
		return append(b, 0x52, byte(v))
	}
	return append(b, 0x70, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// growable reports whether k may be held back for later dispositions of
// its session to fold into.
func (k *foldAt) growable() bool {
	return k.f.holdable && k.f.last != ^uint32(0) && k.f.last-k.f.first+1 < maxFolded
}

// Take hands the flusher what to write of the pending bytes buf, under the
// coalescer's lock. Unless release is set, the dispositions that may still
// grow stay behind as the start of next, the next pending bytes, still
// places to fold into, and holding says so; out is empty when they are all
// that is pending.
//
// A disposition of one delivery is not held: nothing shows that more will
// follow (a request answered, a message now and then), and holding it would
// cost the flusher a second wake-up, by its timer, for the same one write.
// Under load a flush finds several deliveries of a session settled.
func (fs *folds) Take(buf, spare []byte, release bool) (out, next []byte, holding bool) {
	var keep [maxFoldSessions]int // the held entries of fs.at, by position
	n := 0
	if !release {
		for i := range fs.n {
			k := &fs.at[i]
			if !k.growable() || k.f.first == k.f.last {
				continue
			}
			j := n
			for ; j > 0 && fs.at[keep[j-1]].at > k.at; j-- {
				keep[j] = keep[j-1]
			}
			keep[j] = i
			n++
		}
	}
	if n == 0 {
		fs.n = 0
		return buf, spare[:0], false
	}
	held := 0
	for _, i := range keep[:n] {
		held += fs.at[i].size
	}
	if held == len(buf) {
		return spare[:0], buf, true // every entry is held: none is left to drop
	}
	// Cut the held frames out of the bytes to write, in place, and copy
	// them, in order, to the start of the next pending bytes.
	next = spare[:0]
	var kept [maxFoldSessions]foldAt
	w, r := 0, 0
	for j, i := range keep[:n] {
		k := fs.at[i]
		w += copy(buf[w:], buf[r:k.at])
		r = k.at + k.size
		next = append(next, buf[k.at:r]...)
		k.at = len(next) - k.size
		kept[j] = k
	}
	w += copy(buf[w:], buf[r:])
	fs.n = copy(fs.at[:], kept[:n])
	return buf[:w], next, true
}
