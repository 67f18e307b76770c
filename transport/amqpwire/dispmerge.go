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
// (transport/internal/coalesce) therefore has folds, its Folder here, fold
// a disposition into an earlier one of the same session (channel) in the
// pending bytes when both have the same role and byte-identical settled,
// state and batchable fields, and the ranges meet.
//
// A disposition folds into its session's last one as written. It may also
// fold into an earlier one of its session, moving earlier past the
// session's dispositions in between, when both are settled with no state
// or an outcome (holdableTail) and none in between names any of its
// deliveries: the settlement of one delivery says nothing about another,
// and a settled delivery gets no later disposition. Handlers on several
// partitions settle in their own order, not the broker's, so a session's
// settles come with gaps that later ones fill; two ranges that come to
// meet become one. Nothing moves past any other frame of its session.
// Frames of other sessions may lie between, but only transfers, flows and
// empty frames: those concern their own session alone, and sessions are
// independent, so settling a delivery of one session before a transfer of
// another, written in the same flush, asks the same of the peer. Anything
// else (attach, detach, begin, end, close, SASL, a protocol header, bytes
// not understood) ends every fold. Only go-amqp's encoding of a
// disposition (and the one written here) is folded; any other frame passes
// through as written.
//
// A flush would end every range, and the flusher writes as soon as it
// wakes, so settled outcomes that may still grow are held back instead
// (Take): they become the start of the next pending bytes, where later
// dispositions fold into them. A held one goes out with the first flush
// after a frame of its session that is not a disposition, after anything
// that is not session-local, once it can no longer grow, once holdFor has
// passed since it was first held, and on Close. A disposition of one
// delivery is held only while its session is busy: it has others pending,
// or its last one to go out covered more than one delivery.

// dispositionHold is how long the writer of a go-amqp connection holds back
// a disposition that may still grow (the coalescer's holdFor). A
// millisecond is tens of deliveries under load and nothing a person or a
// timeout notices; the settlement of a delivery is not awaited by anyone
// once written.
const dispositionHold = time.Millisecond

// maxFolds bounds the dispositions kept as places to fold into, over all
// sessions: past it the oldest stops being one and is written as it is.
const maxFolds = 32

// maxBusy bounds the sessions remembered as busy (folds.busy).
const maxBusy = 8

// foldAt is a disposition in the pending bytes that others of its session
// may fold into.
type foldAt struct {
	at, size int // where its frame is in the pending bytes
	lastAt   int // where last's four bytes are in the frame (first's are five before); 0 until it is rewritten wide
	f        dispFrame
}

// folds is the coalescer's record of the dispositions in the pending bytes
// that later ones may fold into, in the order of their frames: its Folder
// for go-amqp's stream, one AMQP 1.0 frame per Write. Only the coalescer's
// lock holder touches it.
type folds struct {
	n       int
	at      [maxFolds]foldAt
	scratch []byte // a rewritten disposition, reused
	// busy lists the sessions whose last disposition to go out covered
	// more than one delivery.
	busy  [maxBusy]uint16
	nBusy int
}

// Fold folds p into the pending bytes buf and reports true when p is a
// disposition that folds; otherwise it notes what p means for later folds
// and reports false, and the coalescer appends p.
func (fs *folds) Fold(buf, p []byte) ([]byte, bool) {
	d, ok := parseDisposition(p)
	if !ok {
		if ch, local := sessionLocal(p); local {
			fs.dropSession(ch)
		} else {
			fs.dropAll()
		}
		return buf, false
	}
	if i := fs.into(buf, d, p); i >= 0 {
		return fs.grow(buf, i, min(d.first, fs.at[i].f.first), max(d.last, fs.at[i].f.last)), true
	}
	if fs.n == maxFolds {
		fs.leave(&fs.at[0])
		fs.n--
		copy(fs.at[:], fs.at[1:fs.n+1])
	}
	fs.at[fs.n] = foldAt{at: len(buf), size: len(p), f: d}
	fs.n++
	return buf, false
}

// into finds the entry of fs.at that d (whose frame is p) folds into, or
// -1: its session's last one, or an earlier one when both are settled
// outcomes and no disposition of the session after it names any of d's
// deliveries.
func (fs *folds) into(buf []byte, d dispFrame, p []byte) int {
	latest := true
	for i := fs.n - 1; i >= 0; i-- {
		k := &fs.at[i]
		if k.f.channel != d.channel {
			continue
		}
		if (latest || (k.f.holdable && d.holdable)) && meets(k.f, d) &&
			sameFields(k.f, buf[k.at:k.at+k.size], d, p) && !fs.namedAfter(i, d) {
			return i
		}
		if !d.holdable {
			return -1
		}
		latest = false
	}
	return -1
}

// namedAfter reports whether a disposition of d's session after entry i
// names any of d's deliveries.
func (fs *folds) namedAfter(i int, d dispFrame) bool {
	for j := i + 1; j < fs.n; j++ {
		o := &fs.at[j].f
		if o.channel == d.channel && o.first <= d.last && d.first <= o.last {
			return true
		}
	}
	return false
}

// grow makes entry i cover first..last, rewriting its frame wide once, and
// then joins to it any other entry of its session that its range now
// meets, as into would have.
func (fs *folds) grow(buf []byte, i int, first, last uint32) []byte {
	k := &fs.at[i]
	if k.lastAt == 0 {
		buf = fs.widen(buf, k)
	}
	binary.BigEndian.PutUint32(buf[k.at+k.lastAt-5:], first)
	binary.BigEndian.PutUint32(buf[k.at+k.lastAt:], last)
	k.f.first, k.f.last = first, last
	if !k.f.holdable {
		return buf
	}
	for j := 0; j < fs.n; j++ {
		o := &fs.at[j]
		if j == i || o.f.channel != k.f.channel || !o.f.holdable {
			continue
		}
		a, b := min(i, j), max(i, j) // b's range moves to a's place
		if !meets(fs.at[a].f, fs.at[b].f) || !sameFields(k.f, buf[k.at:k.at+k.size], o.f, buf[o.at:o.at+o.size]) ||
			fs.namedBetween(a, b) {
			continue
		}
		first, last := min(k.f.first, o.f.first), max(k.f.last, o.f.last)
		buf = fs.cut(buf, b)
		return fs.grow(buf, a, first, last)
	}
	return buf
}

// namedBetween reports whether a disposition of entry b's session between
// entries a and b names any of b's deliveries.
func (fs *folds) namedBetween(a, b int) bool {
	f := fs.at[b].f
	for j := a + 1; j < b; j++ {
		o := &fs.at[j].f
		if o.channel == f.channel && o.first <= f.last && f.first <= o.last {
			return true
		}
	}
	return false
}

// cut takes entry i's frame out of buf and the entry out of fs.at.
func (fs *folds) cut(buf []byte, i int) []byte {
	k := fs.at[i]
	copy(buf[k.at:], buf[k.at+k.size:])
	buf = buf[:len(buf)-k.size]
	for j := i + 1; j < fs.n; j++ {
		fs.at[j].at -= k.size
	}
	copy(fs.at[i:], fs.at[i+1:fs.n])
	fs.n--
	return buf
}

// widen rewrites k's frame in buf with its first and last as four-byte
// uints, so that every later fold only patches them in place; the bytes
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

// dropSession ends the folds of session ch: a frame of it that is not a
// disposition follows them.
func (fs *folds) dropSession(ch uint16) {
	n := 0
	for i := range fs.n {
		if fs.at[i].f.channel == ch {
			fs.leave(&fs.at[i])
			continue
		}
		fs.at[n] = fs.at[i]
		n++
	}
	fs.n = n
}

func (fs *folds) dropAll() {
	for i := range fs.n {
		fs.leave(&fs.at[i])
	}
	fs.n = 0
}

// leave notes that k stops being a place to fold into: its session is
// busy when it covers more than one delivery, and no longer when it covers
// one.
func (fs *folds) leave(k *foldAt) {
	ch, many := k.f.channel, k.f.first != k.f.last
	for i := range fs.nBusy {
		if fs.busy[i] == ch {
			if !many {
				fs.nBusy--
				fs.busy[i] = fs.busy[fs.nBusy]
			}
			return
		}
	}
	if many && fs.nBusy < len(fs.busy) {
		fs.busy[fs.nBusy] = ch
		fs.nBusy++
	}
}

func (fs *folds) isBusy(ch uint16) bool {
	for _, b := range fs.busy[:fs.nBusy] {
		if b == ch {
			return true
		}
	}
	return false
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

// meets reports whether the ranges of a and b, of one session, are next
// to each other, so that one disposition may cover both.
func meets(a, b dispFrame) bool {
	return a.last != ^uint32(0) && b.last != ^uint32(0) && (b.first == a.last+1 || a.first == b.last+1) &&
		max(a.last, b.last)-min(a.first, b.first) < maxFolded
}

// sameFields reports whether dispositions a and b (frames af and bf) ask
// the same of their deliveries: one role, the same fields after last.
func sameFields(a dispFrame, af []byte, b dispFrame, bf []byte) bool {
	return a.channel == b.channel && a.role == b.role && a.tailFields == b.tailFields && bytes.Equal(af[a.tail:], bf[b.tail:])
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
// that is pending. One stays behind only if no disposition of its session
// written now names its deliveries.
//
// A disposition of one delivery is held only while its session is busy:
// otherwise nothing shows that more will follow (a request answered, a
// message now and then), and holding it would cost the flusher a second
// wake-up, by its timer, for the same one write.
func (fs *folds) Take(buf, spare []byte, release bool) (out, next []byte, holding bool) {
	var hold [maxFolds]bool
	n := 0
	if !release {
		for i := fs.n - 1; i >= 0; i-- {
			k := &fs.at[i]
			if !k.growable() || (k.f.first == k.f.last && !fs.sessionBusy(i)) || fs.writtenAfter(i, &hold) {
				continue
			}
			hold[i] = true
			n++
		}
	}
	for i := range fs.n {
		if !hold[i] {
			fs.leave(&fs.at[i])
		}
	}
	if n == 0 {
		fs.n = 0
		return buf, spare[:0], false
	}
	held := 0
	for i := range fs.n {
		if hold[i] {
			held += fs.at[i].size
		}
	}
	if held == len(buf) {
		return spare[:0], buf, true // every entry is held: none is left to drop
	}
	// Cut the held frames out of the bytes to write, in place, and copy
	// them, in order, to the start of the next pending bytes.
	next = spare[:0]
	w, r, m := 0, 0, 0
	for i := range fs.n {
		if !hold[i] {
			continue
		}
		k := fs.at[i]
		w += copy(buf[w:], buf[r:k.at])
		r = k.at + k.size
		next = append(next, buf[k.at:r]...)
		k.at = len(next) - k.size
		fs.at[m] = k
		m++
	}
	w += copy(buf[w:], buf[r:])
	fs.n = m
	return buf[:w], next, true
}

// sessionBusy reports whether entry i's session has other dispositions
// pending or its last one to go out covered more than one delivery.
func (fs *folds) sessionBusy(i int) bool {
	ch := fs.at[i].f.channel
	for j := range fs.n {
		if j != i && fs.at[j].f.channel == ch {
			return true
		}
	}
	return fs.isBusy(ch)
}

// writtenAfter reports whether a disposition of entry i's session after it
// that is not held names any of its deliveries.
func (fs *folds) writtenAfter(i int, hold *[maxFolds]bool) bool {
	f := fs.at[i].f
	for j := i + 1; j < fs.n; j++ {
		o := &fs.at[j].f
		if !hold[j] && o.channel == f.channel && o.first <= f.last && f.first <= o.last {
			return true
		}
	}
	return false
}
