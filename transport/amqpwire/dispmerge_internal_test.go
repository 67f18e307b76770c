package amqpwire

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
)

var (
	accepted = []byte{0x00, 0x53, 0x24, 0x45}
	released = []byte{0x00, 0x53, 0x26, 0x45}
)

// goDisp encodes a disposition as go-amqp does (encoding.MarshalComposite:
// always a list32, trailing omitted fields dropped, omitted ones before a
// present one as null): role, first, last (nil: omitted), settled (false:
// omitted), state (nil: omitted).
func goDisp(ch uint16, role bool, first uint32, last *uint32, settled bool, state []byte) []byte {
	fields := [][]byte{encBool(role), encUint(first), nil, nil, nil}
	if last != nil {
		fields[2] = encUint(*last)
	}
	if settled {
		fields[3] = encBool(true)
	}
	if state != nil {
		fields[4] = state
	}
	n := len(fields)
	for n > 0 && fields[n-1] == nil {
		n--
	}
	var content []byte
	for _, f := range fields[:n] {
		if f == nil {
			f = null
		}
		content = append(content, f...)
	}
	b := []byte{0x00, 0x53, 0x15, 0xd0}
	b = binary.BigEndian.AppendUint32(b, uint32(len(content)+4))
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	return frame(0, ch, append(b, content...))
}

// queue is the coalescer's queueing of one frame p: folded into buf by
// fs, or appended.
func queue(fs *folds, buf, p []byte) []byte {
	buf, folded := fs.Fold(buf, p)
	if folded {
		return buf
	}
	return append(buf, p...)
}

// fold runs frames through the coalescer's queueing, as if written while
// the flusher was busy, and returns the bytes it would write.
func fold(frames ...[]byte) []byte {
	var fs folds
	var buf []byte
	for _, f := range frames {
		buf = queue(&fs, buf, f)
	}
	return buf
}

func wireFrames(t *testing.T, b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		require.GreaterOrEqual(t, len(b), 8)
		n := int(binary.BigEndian.Uint32(b))
		if string(b[:4]) == "AMQP" {
			n = 8
		}
		require.LessOrEqual(t, n, len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// action is what a frame asks of one delivery, or (id -1) a frame that is
// not a disposition, by its bytes.
type action struct {
	ch                     uint16
	id                     int64
	role, settled, batched bool
	state                  string
	other                  string
}

// decodeDisp is an independent decoder of a disposition frame (any list
// encoding, any uint encoding) into one action per delivery-id of its
// range; ok is false for any other frame.
func decodeDisp(t *testing.T, f []byte) ([]action, bool) {
	if len(f) < 11 || f[5] != 0 || f[8] != 0 || f[9] != 0x53 || f[10] != 0x15 {
		return nil, false
	}
	doff := int(f[4]) * 4
	require.Equal(t, 8, doff)
	body := f[doff+3:]
	var pos, count int
	switch body[0] {
	case 0xc0:
		require.Equal(t, len(body), 2+int(body[1]))
		pos, count = 3, int(body[2])
	case 0xd0:
		require.Equal(t, len(body), 5+int(binary.BigEndian.Uint32(body[1:])))
		pos, count = 9, int(binary.BigEndian.Uint32(body[5:]))
	default:
		t.Fatalf("list constructor 0x%02x", body[0])
	}
	var fields [6][]byte
	for i := range count {
		end := skip(body, pos)
		require.Positive(t, end, "field %d", i)
		fields[i] = body[pos:end]
		pos = end
	}
	require.Equal(t, len(body), pos, "the list ends where its fields do")
	asUint := func(b []byte) (int64, bool) {
		switch {
		case b == nil || b[0] == 0x40:
			return 0, false
		case b[0] == 0x43:
			return 0, true
		case b[0] == 0x52:
			return int64(b[1]), true
		case b[0] == 0x70:
			return int64(binary.BigEndian.Uint32(b[1:])), true
		}
		t.Fatalf("uint constructor 0x%02x", b[0])
		return 0, false
	}
	asBool := func(b []byte) bool {
		switch {
		case b == nil || b[0] == 0x40 || b[0] == 0x42:
			return false
		case b[0] == 0x41:
			return true
		case b[0] == 0x56:
			return b[1] != 0
		}
		t.Fatalf("boolean constructor 0x%02x", b[0])
		return false
	}
	first, ok := asUint(fields[1])
	require.True(t, ok)
	last, ok := asUint(fields[2])
	if !ok {
		last = first
	}
	var out []action
	for id := first; id <= last; id++ {
		out = append(out, action{ch: binary.BigEndian.Uint16(f[6:]), id: id, role: asBool(fields[0]),
			settled: asBool(fields[3]), state: string(fields[4]), batched: asBool(fields[5])})
	}
	return out, true
}

// meaning is what a stream of frames asks of the peer, delivery by
// delivery and frame by frame, in order.
func meaning(t *testing.T, b []byte) []action {
	var out []action
	for _, f := range wireFrames(t, b) {
		if as, ok := decodeDisp(t, f); ok {
			out = append(out, as...)
		} else {
			out = append(out, action{id: -1, other: string(f)})
		}
	}
	return out
}

func u32(v uint32) *uint32 { return &v }

func encWide(v uint32) []byte { return binary.BigEndian.AppendUint32([]byte{0x70}, v) }

// segments cuts a stream at the frames no fold crosses (any frame but a
// disposition, a transfer, a flow or an empty frame) and returns, per
// segment, what each session asks of the peer in order, and the cuts.
func segments(t *testing.T, b []byte) (segs []map[uint16][]action, cuts []string) {
	cur := map[uint16][]action{}
	for _, f := range wireFrames(t, b) {
		if as, ok := decodeDisp(t, f); ok {
			ch := as[0].ch
			cur[ch] = append(cur[ch], as...)
			continue
		}
		if ch, local := sessionLocal(f); local {
			cur[ch] = append(cur[ch], action{ch: ch, id: -1, other: string(f)})
			continue
		}
		segs, cuts = append(segs, cur), append(cuts, string(f))
		cur = map[uint16][]action{}
	}
	return append(segs, cur), cuts
}

// byDelivery is what segments returns, with each session's dispositions
// between two of its other frames keyed by delivery-id: the order of
// dispositions of different deliveries is free, that of one delivery's
// and of the other frames is not.
func byDelivery(segs []map[uint16][]action) []map[uint16][]map[int64][]action {
	out := make([]map[uint16][]map[int64][]action, len(segs))
	for i, seg := range segs {
		out[i] = map[uint16][]map[int64][]action{}
		for ch, as := range seg {
			pieces := []map[int64][]action{{}}
			for _, a := range as {
				if a.id < 0 {
					pieces = append(pieces, map[int64][]action{-1: {a}}, map[int64][]action{})
					continue
				}
				last := pieces[len(pieces)-1]
				last[a.id] = append(last[a.id], a)
			}
			out[i][ch] = pieces
		}
	}
	return out
}

// TestFoldAcrossOtherSessions: a disposition folds into an earlier one of
// its session past transfers, flows and dispositions of other sessions,
// never past a frame of its own session or one that is not session-local.
func TestFoldAcrossOtherSessions(t *testing.T) {
	a4, a5 := goDisp(1, true, 4, nil, true, accepted), goDisp(1, true, 5, nil, true, accepted)
	other := [][]byte{
		transferFrame(2, xfer{id: 7}, message("x")),
		frame(0, 2, performative(0x13, encUint(0), encUint(5000), encUint(1), encUint(5000))),
		goDisp(2, true, 9, nil, true, accepted),
	}
	out := fold(append(append([][]byte{a4}, other...), a5)...)
	wantA := frame(0, 1, performative(0x15, encBool(true), encWide(4), encWide(5), encBool(true), accepted))
	require.Equal(t, concat(append([][]byte{wantA}, other...)...), out)

	for name, between := range map[string][]byte{
		"a transfer of its session": transferFrame(1, xfer{id: 7}, message("x")),
		"a flow of its session":     frame(0, 1, performative(0x13, encUint(0), encUint(5000), encUint(1), encUint(5000))),
		"an attach of another":      frame(0, 2, performative(0x12, encStr("l"), encUint(0), encBool(true))),
		"a detach of another":       frame(0, 2, performative(0x16, encUint(0), encBool(true))),
		"an end of another":         frame(0, 2, performative(0x17)),
		"a close":                   frame(0, 0, performative(0x18)),
		"a protocol header":         amqpHeader,
	} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, concat(a4, between, a5), fold(a4, between, a5))
		})
	}
}

// The exported Coalesce is for other protocols' streams, which a buffered
// writer cuts anywhere: bytes that look like dispositions pass as written.
func TestCoalesceExportedNeverFolds(t *testing.T) {
	var in [][]byte
	for id := range uint32(10) {
		in = append(in, goDisp(1, true, id, nil, true, accepted))
	}
	rc := newRecordingConn()
	c := Coalesce(rc)
	for _, f := range in {
		_, err := c.Write(f)
		require.NoError(t, err)
	}
	require.NoError(t, c.Close(), "Close writes what is pending")
	got := rc.snapshot()
	require.Equal(t, bytes.Join(in, nil), got)
}

func TestFoldContiguousAcceptsIntoOneRange(t *testing.T) {
	var in [][]byte
	for id := range uint32(300) { // across the 0, one-byte and four-byte encodings
		in = append(in, goDisp(1, true, id, nil, true, accepted))
	}
	out := fold(in...)
	frames := wireFrames(t, out)
	require.Len(t, frames, 1)
	require.Equal(t, meaning(t, bytes.Join(in, nil)), meaning(t, out))
	as, _ := decodeDisp(t, frames[0])
	require.Equal(t, action{ch: 1, id: 0, role: true, settled: true, state: string(accepted)}, as[0])
	require.EqualValues(t, 299, as[len(as)-1].id)
	// The frame written: role, first, last (both four-byte uints, so that
	// a fold patches last in place), settled, state in a list8.
	want := frame(0, 1, performative(0x15, encBool(true), encWide(0), encWide(299), encBool(true), accepted))
	require.Equal(t, want, frames[0])
}

func TestFoldKeepsApartWhatDiffers(t *testing.T) {
	transfer := transferFrame(1, xfer{id: 9}, message("x"))
	cases := []struct {
		name string
		a, b []byte
	}{
		{"a gap", goDisp(1, true, 4, nil, true, accepted), goDisp(1, true, 6, nil, true, accepted)},
		{"the same id", goDisp(1, true, 5, nil, true, accepted), goDisp(1, true, 5, nil, true, accepted)},
		{"another channel", goDisp(1, true, 4, nil, true, accepted), goDisp(2, true, 5, nil, true, accepted)},
		{"another role", goDisp(1, true, 4, nil, true, accepted), goDisp(1, false, 5, nil, true, accepted)},
		{"unsettled and settled", goDisp(1, true, 4, nil, false, accepted), goDisp(1, true, 5, nil, true, accepted)},
		{"another outcome", goDisp(1, true, 4, nil, true, accepted), goDisp(1, true, 5, nil, true, released)},
		{"a state and none", goDisp(1, true, 4, nil, true, accepted), goDisp(1, true, 5, nil, true, nil)},
		{"past the top of the serial range", goDisp(1, true, ^uint32(0), nil, true, accepted), goDisp(1, true, 0, nil, true, accepted)},
		{"a range beyond maxFolded", goDisp(1, true, 0, u32(maxFolded-2), true, accepted), goDisp(1, true, maxFolded-1, u32(maxFolded), true, accepted)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, concat(c.a, c.b), fold(c.a, c.b), "written as they came")
		})
	}
	t.Run("a frame between", func(t *testing.T) {
		a, b := goDisp(1, true, 4, nil, true, accepted), goDisp(1, true, 5, nil, true, accepted)
		require.Equal(t, concat(a, transfer, b), fold(a, transfer, b))
	})
}

// TestFoldFillsGaps: settles that come out of the broker's order, as
// handlers on several partitions make them, fill the gaps they leave and
// end in one range, as long as nothing else of their session lies between.
func TestFoldFillsGaps(t *testing.T) {
	var in [][]byte
	for p := range uint32(8) { // partition p handles p, p+8, p+16
		for id := p; id < 24; id += 8 {
			in = append(in, goDisp(1, true, id, nil, true, accepted))
		}
	}
	require.Equal(t, wideAccept(1, 0, 23), fold(in...))
	require.Equal(t, wideAccept(1, 4, 5), fold(goDisp(1, true, 5, nil, true, accepted), goDisp(1, true, 4, nil, true, accepted)), "descending")

	a, c := goDisp(1, true, 0, nil, true, accepted), goDisp(1, true, 1, nil, true, accepted)
	unsettled := func(id uint32) []byte { return goDisp(1, true, id, nil, false, accepted) }
	require.Equal(t, concat(wideAccept(1, 0, 1), unsettled(5)), fold(a, unsettled(5), c),
		"a settled outcome moves earlier past a disposition of other deliveries")
	require.Equal(t, concat(a, unsettled(1), c), fold(a, unsettled(1), c),
		"never past one that names the same delivery")
	require.Equal(t, concat(unsettled(0), unsettled(3), unsettled(1)), fold(unsettled(0), unsettled(3), unsettled(1)),
		"what is not a settled outcome folds only into its session's last disposition")
	require.Equal(t, concat(a, flow1, c), fold(a, flow1, c), "nor past another frame of its session")
}

func TestFoldPassesThroughWhatItDoesNotKnow(t *testing.T) {
	d := goDisp(1, true, 4, nil, true, accepted)
	extended := frame(0, 1, append([]byte{0, 0, 0, 0}, d[8:]...))
	extended[4] = 3
	withPayload := append(bytes.Clone(d), 0xff)
	binary.BigEndian.PutUint32(withPayload, uint32(len(withPayload)))
	for name, f := range map[string][]byte{
		"an ulong first":         frame(0, 1, performative(0x15, encBool(true), []byte{0x80, 0, 0, 0, 0, 0, 0, 0, 5}, null, encBool(true), accepted)),
		"a null role":            frame(0, 1, performative(0x15, null, encUint(5), null, encBool(true), accepted)),
		"no first":               frame(0, 1, performative(0x15, encBool(true))),
		"an extended header":     extended,
		"bytes after the list":   withPayload,
		"a SASL frame":           func() []byte { f := bytes.Clone(d); f[5] = 1; return f }(),
		"a list8 size too short": func() []byte { f := frame(0, 1, performative(0x15, encBool(true), encUint(5))); f[12]--; return f }(),
		"seven fields":           frame(0, 1, performative(0x15, encBool(true), encUint(5), null, encBool(true), accepted, encBool(false), null)),
		"a state cut short":      frame(0, 1, performative(0x15, encBool(true), encUint(5), null, encBool(true), []byte{0x00, 0x53})),
		"last before first":      goDisp(1, true, 5, u32(4), true, accepted),
		"a protocol header":      amqpHeader,
	} {
		t.Run(name, func(t *testing.T) {
			_, ok := parseDisposition(f)
			require.False(t, ok)
			// Neither folded itself nor into its neighbours.
			prev, next := goDisp(1, true, 4, nil, true, accepted), goDisp(1, true, 5, nil, true, accepted)
			require.Equal(t, concat(prev, f, next), fold(prev, f, next))
		})
	}
}

// TestFoldMeansTheSame: random streams of dispositions (two sessions, both
// roles, some states, single ids and ranges, in any encoding go-amqp or a
// fold writes) mixed with transfers, flows and detaches ask exactly the
// same of the peer once folded, in fewer or as many frames: every session
// the same, delivery by delivery and frame by frame in order, and the
// frames no fold crosses where they were.
func TestFoldMeansTheSame(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		in := randomStream(r)
		out := fold(in...)
		inSegs, inCuts := segments(t, bytes.Join(in, nil))
		outSegs, outCuts := segments(t, out)
		require.Equal(t, inCuts, outCuts, "round %d: the frames no fold crosses, in order", round)
		require.Equal(t, byDelivery(inSegs), byDelivery(outSegs), "round %d: each session asks the same of each delivery, in order", round)
		require.LessOrEqual(t, len(wireFrames(t, out)), len(in))
		// What a fold wrote folds again into what means the same.
		againSegs, _ := segments(t, fold(wireFrames(t, out)...))
		require.Equal(t, byDelivery(outSegs), byDelivery(againSegs))
	}
}

// txnState is a transactional-state, which is folded but never held.
var txnState = []byte{0x00, 0x53, 0x34, 0xc0, 0x07, 0x01, 0xa0, 0x04, 't', 'x', 'n', '1'}

// randomStream is up to 120 frames: dispositions of two sessions (both
// roles, settled or not, five states, single ids and ranges, gaps, ids out
// of order, repeated ids, ids at the top of the serial range) mixed with transfers, flows and
// detaches.
func randomStream(r *rand.Rand) [][]byte {
	states := [][]byte{nil, accepted, released, {0x00, 0x53, 0x25, 0xc0, 0x01, 0x00}, txnState}
	var in [][]byte
	next := [2]uint32{uint32(r.IntN(300)), ^uint32(0) - 40}
	for range 1 + r.IntN(120) {
		ch := uint16(r.IntN(2))
		switch r.IntN(12) {
		case 0:
			in = append(in, transferFrame(ch, xfer{id: r.Uint32()}, message("m")))
			continue
		case 10:
			in = append(in, frame(0, ch, performative(0x13, encUint(0), encUint(5000), encUint(1), encUint(5000))))
			continue
		case 11:
			if r.IntN(3) == 0 { // a frame no fold crosses
				in = append(in, frame(0, ch, performative(0x16, encUint(0), encBool(false))))
				continue
			}
		case 1:
			next[ch] += 1 + uint32(r.IntN(2)) // a gap
		case 2:
			next[ch]-- // the last id again
		case 3:
			next[ch] -= uint32(r.IntN(8)) // back into a gap, or over ids already settled
		}
		first := next[ch]
		var last *uint32
		if r.IntN(4) == 0 {
			l := first + uint32(r.IntN(5))
			if l < first {
				l = first
			}
			last = u32(l)
			next[ch] = l + 1
		} else {
			next[ch] = first + 1
		}
		role, settled, state := true, true, states[1]
		if r.IntN(8) == 0 {
			role = false
		}
		if r.IntN(8) == 0 {
			settled = false
		}
		if r.IntN(6) == 0 {
			state = states[r.IntN(len(states))]
		}
		in = append(in, goDisp(ch, role, first, last, settled, state))
	}
	return in
}

func TestFoldAllocatesNothing(t *testing.T) {
	frames := make([][]byte, 256)
	for i := range frames {
		frames[i] = goDisp(1, true, uint32(i), nil, true, accepted)
	}
	var fs folds
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		buf, fs.n = buf[:0], 0
		for _, f := range frames {
			buf = queue(&fs, buf, f)
		}
	})
	require.Zero(t, allocs)
}

// recordingWrites keeps a copy of every Write go-amqp makes: one frame
// each.
type recordingWrites struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (r *recordingWrites) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.writes = append(r.writes, bytes.Clone(p))
	r.mu.Unlock()
	return r.Conn.Write(p)
}

// TestFoldGoAMQPsOwnDispositions: the dispositions go-amqp's Receiver
// really writes (one per AcceptMessage) are understood and fold into one.
func TestFoldGoAMQPsOwnDispositions(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	const n = 40
	var transfers [][]byte
	for i := range n {
		transfers = append(transfers, transferFrame(0, xfer{id: uint32(i)}, message(fmt.Sprint("m", i))))
	}
	done := make(chan error, 1)
	go (&fakePeer{conn: server}).serve(transfers, done)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := &recordingWrites{Conn: client}
	conn, err := amqp.NewConn(ctx, rec, &amqp.ConnOptions{IdleTimeout: -1})
	require.NoError(t, err)
	sess, err := conn.NewSession(ctx, nil)
	require.NoError(t, err)
	rsm := amqp.ReceiverSettleModeFirst
	rcv, err := sess.NewReceiver(ctx, "/queues/q", &amqp.ReceiverOptions{Credit: n, SettlementMode: &rsm})
	require.NoError(t, err)
	for range n {
		m, err := rcv.Receive(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, rcv.AcceptMessage(ctx, m))
	}
	if err := conn.Close(); err != nil {
		// go-amqp can meet its own end of the synchronous pipe closed while
		// it shuts down (1 run in about 50 under -race): the close is not
		// what this test reads; the dispositions written before it are.
		require.ErrorContains(t, err, io.ErrClosedPipe.Error(), "go-amqp keeps only the text")
	}
	require.NoError(t, <-done, "the peer's script")

	rec.mu.Lock()
	defer rec.mu.Unlock()
	var disps [][]byte
	for _, w := range rec.writes {
		if _, ok := parseDisposition(w); ok {
			disps = append(disps, w)
		}
	}
	require.Len(t, disps, n, "go-amqp's own encoding is understood")
	out := fold(disps...)
	require.Len(t, wireFrames(t, out), 1)
	got := meaning(t, out)
	require.Equal(t, meaning(t, bytes.Join(disps, nil)), got)
	require.Len(t, got, n)
	require.Equal(t, action{ch: 0, id: 0, role: true, settled: true, state: string(accepted)}, got[0])
}

// TestGoAMQPDecodesAFold: a folded disposition, written by a peer to
// go-amqp's Sender, settles every transfer of its range as accepted.
func TestGoAMQPDecodesAFold(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	const n = 300
	done := make(chan error, 1)
	go func() {
		p := &fakePeer{conn: server}
		defer peerDone(done)
		p.handshake(true)
		p.write(frame(0, 0, performative(0x13, encUint(0), encUint(5000), encUint(1), encUint(5000), encUint(0), encUint(0), encUint(n))))
		var disps [][]byte
		for i := range n {
			p.expect(0x14)
			disps = append(disps, goDisp(0, true, uint32(i), nil, true, accepted))
		}
		folded := fold(disps...)
		if len(folded) > 40 {
			p.must(fmt.Errorf("the dispositions did not fold: %d bytes", len(folded)))
		}
		p.write(folded)
		p.answerClose()
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, sess := openFake(ctx, t, client)
	snd, err := sess.NewSender(ctx, "/queues/q", nil)
	require.NoError(t, err)
	var receipts []amqp.SendReceipt
	for i := range n {
		r, err := snd.SendWithReceipt(ctx, amqp.NewMessage([]byte(fmt.Sprint(i))), nil)
		require.NoError(t, err)
		receipts = append(receipts, r)
	}
	for i, r := range receipts {
		st, err := r.Wait(ctx)
		require.NoError(t, err, "delivery %d", i)
		require.IsType(t, &amqp.StateAccepted{}, st, "delivery %d", i)
	}
	if err := conn.Close(); err != nil {
		// As in the tests above: go-amqp can meet its own end of the
		// synchronous pipe closed while it shuts down; what this test reads
		// is the settlement of every transfer, before the close.
		require.ErrorContains(t, err, io.ErrClosedPipe.Error(), "go-amqp keeps only the text")
	}
	require.NoError(t, <-done, "the peer's script")
	_, _ = io.Copy(io.Discard, server)
}
