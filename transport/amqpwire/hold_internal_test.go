package amqpwire

import (
	"bytes"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/transport/internal/coalesce"
)

// holder drives the folder as the coalescer does, by hand: write is
// go-amqp's Write, flush what the flusher would write next.
type holder struct {
	fs         folds
	buf, spare []byte
}

func newHolder() *holder { return &holder{} }

func (h *holder) write(frames ...[]byte) {
	for _, f := range frames {
		h.buf = queue(&h.fs, h.buf, f)
	}
}

// take is the coalescer's: the folder splits the pending bytes, and the
// bytes written become the next flush's spare.
func (h *holder) take(release bool) ([]byte, bool) {
	out, next, holding := h.fs.Take(h.buf, h.spare, release)
	h.buf, h.spare = next, out
	return out, holding
}

// flush is one flush that may hold (release false) or may not (the
// flusher's timer, Close); it returns what goes to the socket.
func (h *holder) flush(release bool) ([]byte, bool) {
	out, holding := h.take(release)
	return bytes.Clone(out), holding
}

var (
	flow1     = frame(0, 1, performative(0x13, encUint(0), encUint(5000), encUint(1), encUint(5000)))
	transfer1 = transferFrame(1, xfer{id: 7}, message("x"))
	transfer2 = transferFrame(2, xfer{id: 7}, message("x"))
)

func wideAccept(ch uint16, first, last uint32) []byte {
	return frame(0, ch, performative(0x15, encBool(true), encWide(first), encWide(last), encBool(true), accepted))
}

// TestHoldGrowsAcrossFlushes: a session's disposition that may still grow
// stays behind across flushes, while the frames of other sessions go out,
// and the dispositions written meanwhile fold into it; the next frame of
// its session takes it out, before that frame.
func TestHoldGrowsAcrossFlushes(t *testing.T) {
	h := newHolder()
	h.write(goDisp(1, true, 0, nil, true, accepted))
	out, holding := h.flush(false)
	require.Equal(t, goDisp(1, true, 0, nil, true, accepted), out, "one delivery alone is not held")
	require.False(t, holding)
	h.write(goDisp(1, true, 1, nil, true, accepted), goDisp(1, true, 2, nil, true, accepted))
	for id := uint32(3); id < 10; id++ {
		out, holding := h.flush(false)
		require.Empty(t, out, "id %d: nothing but a range that may grow", id)
		require.True(t, holding)
		h.write(goDisp(1, true, id, nil, true, accepted))
	}
	h.write(transfer2)
	out, holding = h.flush(false)
	require.Equal(t, transfer2, out, "another session's frame goes out; the range stays behind")
	require.True(t, holding)
	h.write(goDisp(1, true, 10, nil, true, accepted))
	out, _ = h.flush(false)
	require.Empty(t, out)
	h.write(flow1)
	out, holding = h.flush(false)
	require.Equal(t, concat(wideAccept(1, 1, 10), flow1), out, "one range of 10, before its session's flow")
	require.False(t, holding)
	out, _ = h.flush(false)
	require.Empty(t, out)
}

// TestHoldReleases: each thing that ends a held range writes it, in order.
func TestHoldReleases(t *testing.T) {
	d14, d27 := goDisp(1, true, 3, u32(4), true, accepted), goDisp(2, true, 6, u32(7), true, accepted)
	cases := []struct {
		name    string
		write   []byte
		want    []byte // the flush after write
		holding bool   // something is still held after it
	}{
		{"a transfer of its session", transfer1, concat(d14, transfer1), true},
		{"a flow of its session", flow1, concat(d14, flow1), true},
		{"an empty frame of its session", frame(0, 1, nil), concat(d14, frame(0, 1, nil)), true},
		// What does not end it: another range of its session, held beside it
		// for the gap to fill, and a disposition written now that names
		// other deliveries.
		{"a gap", goDisp(1, true, 6, u32(7), true, accepted), []byte{}, true},
		{"a gap, and one delivery", goDisp(1, true, 6, nil, true, accepted), []byte{}, true},
		{"another outcome", goDisp(1, true, 5, u32(6), true, released), []byte{}, true},
		{"another role", goDisp(1, false, 5, u32(6), true, accepted), []byte{}, true},
		{"an unsettled one, never held", goDisp(1, true, 5, u32(6), false, accepted), goDisp(1, true, 5, u32(6), false, accepted), true},
		{"a transactional one, never held", goDisp(1, true, 5, u32(6), true, txnState), goDisp(1, true, 5, u32(6), true, txnState), true},
		{"an unsettled one of the same deliveries", goDisp(1, true, 4, nil, false, accepted), concat(d14, goDisp(1, true, 4, nil, false, accepted)), true},
		{"an attach of another session", frame(0, 3, performative(0x12, encStr("l"), encUint(0), encBool(true))),
			concat(d14, d27, frame(0, 3, performative(0x12, encStr("l"), encUint(0), encBool(true)))), false},
		{"a detach of its session", frame(0, 1, performative(0x16, encUint(0), encBool(true))),
			concat(d14, d27, frame(0, 1, performative(0x16, encUint(0), encBool(true)))), false},
		{"a begin", frame(0, 3, performative(0x11, null, encUint(0), encUint(5000), encUint(5000))),
			concat(d14, d27, frame(0, 3, performative(0x11, null, encUint(0), encUint(5000), encUint(5000)))), false},
		{"an end of another session", frame(0, 3, performative(0x17)), concat(d14, d27, frame(0, 3, performative(0x17))), false},
		{"a close", frame(0, 0, performative(0x18)), concat(d14, d27, frame(0, 0, performative(0x18))), false},
		{"a protocol header", amqpHeader, concat(d14, d27, amqpHeader), false},
		{"bytes not understood", []byte("junk"), concat(d14, d27, []byte("junk")), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHolder()
			h.write(d14, transfer2, d27)
			out, holding := h.flush(false)
			require.Equal(t, transfer2, out)
			require.True(t, holding)
			h.write(c.write)
			out, holding = h.flush(false)
			require.Equal(t, c.want, out, "%q", out)
			require.Equal(t, c.holding, holding)
			out, holding = h.flush(true)
			require.False(t, holding)
			rest, _ := h.flush(false)
			require.Empty(t, rest)
			// Whatever was still held goes out on release, and the
			// whole stream asks what was written.
			all := concat(transfer2, c.want, out)
			in := concat(d14, transfer2, d27, c.write)
			if c.name == "bytes not understood" {
				require.Equal(t, concat(transfer2, d14, d27, []byte("junk")), all)
				return
			}
			inSegs, inCuts := segments(t, in)
			outSegs, outCuts := segments(t, all)
			require.Equal(t, inCuts, outCuts)
			require.Equal(t, byDelivery(inSegs), byDelivery(outSegs))
		})
	}
	t.Run("the timer or Close", func(t *testing.T) {
		h := newHolder()
		h.write(d14, transfer2, d27)
		h.flush(false)
		out, holding := h.flush(true)
		require.Equal(t, concat(d14, d27), out)
		require.False(t, holding)
	})
}

// TestHoldOnlyWhatMayGrow: a disposition that nothing can join, or that
// someone waits on, is written with the flush.
func TestHoldOnlyWhatMayGrow(t *testing.T) {
	for name, frames := range map[string][][]byte{
		"unsettled":               {goDisp(1, true, 4, u32(5), false, accepted)},
		"one delivery":            {goDisp(1, true, 4, nil, true, accepted)},
		"a transactional state":   {goDisp(1, true, 4, u32(5), true, txnState)},
		"a full range":            {goDisp(1, true, 0, u32(maxFolded-1), true, accepted)},
		"a range grown full":      {goDisp(1, true, 0, u32(maxFolded-2), true, accepted), goDisp(1, true, maxFolded-1, nil, true, accepted)},
		"the top of the range":    {goDisp(1, true, ^uint32(0)-1, u32(^uint32(0)), true, accepted)},
		"settled as boolean 0x56": {frame(0, 1, performative(0x15, encBool(true), encUint(4), encUint(5), []byte{0x56, 0}, accepted))},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHolder()
			h.write(frames...)
			out, holding := h.flush(false)
			require.False(t, holding)
			require.Equal(t, meaning(t, bytes.Join(frames, nil)), meaning(t, out))
		})
	}
	for name, f := range map[string][]byte{
		"no state":             goDisp(1, true, 4, u32(5), true, nil),
		"a null state":         frame(0, 1, performative(0x15, encBool(true), encUint(4), encUint(5), encBool(true), null)),
		"rejected":             goDisp(1, true, 4, u32(5), true, []byte{0x00, 0x53, 0x25, 0xc0, 0x01, 0x00}),
		"modified":             goDisp(1, true, 4, u32(5), true, []byte{0x00, 0x53, 0x27, 0x45}),
		"settled as 0x56 0x01": frame(0, 1, performative(0x15, encBool(true), encUint(4), encUint(5), []byte{0x56, 1}, accepted)),
		"the sender's role":    goDisp(1, false, 4, u32(5), true, accepted),
	} {
		t.Run("held: "+name, func(t *testing.T) {
			h := newHolder()
			h.write(f)
			out, holding := h.flush(false)
			require.True(t, holding)
			require.Empty(t, out)
			out, _ = h.flush(true)
			require.Equal(t, f, out)
		})
	}
}

// TestHoldMeansTheSame: the random streams of TestFoldMeansTheSame, cut
// into flushes at random (some of them releasing, as the timer does), ask
// exactly the same of the peer as written: every session the same, in
// order, and the frames no fold crosses where they were.
func TestHoldMeansTheSame(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var heldFrames, flushFrames int
	for round := range 500 {
		in := randomStream(r)
		// The same cuts, holding and not (every flush releasing, as
		// before holding).
		cuts := make([]int, len(in)) // 0: none, 1: a flush, 2: a releasing one
		for i := range cuts {
			if r.IntN(3) == 0 {
				cuts[i] = 1
				if r.IntN(20) == 0 {
					cuts[i] = 2
				}
			}
		}
		run := func(hold bool) []byte {
			h := newHolder()
			var out []byte
			for i, f := range in {
				h.write(f)
				if cuts[i] > 0 {
					b, _ := h.flush(!hold || cuts[i] == 2)
					out = append(out, b...)
				}
			}
			b, holding := h.flush(true)
			require.False(t, holding)
			return append(out, b...)
		}
		out := run(true)
		inSegs, inCuts := segments(t, bytes.Join(in, nil))
		outSegs, outCuts := segments(t, out)
		require.Equal(t, inCuts, outCuts, "round %d: the frames no fold crosses, in order", round)
		require.Equal(t, byDelivery(inSegs), byDelivery(outSegs), "round %d: each session asks the same of each delivery, in order", round)
		require.LessOrEqual(t, len(wireFrames(t, out)), len(in))
		heldFrames += len(wireFrames(t, out))
		flushFrames += len(wireFrames(t, run(false)))
	}
	t.Logf("frames written: %d holding, %d folding within each flush only", heldFrames, flushFrames)
	require.Less(t, heldFrames, flushFrames)
}

func TestHoldAllocatesNothing(t *testing.T) {
	frames := make([][]byte, 256)
	for i := range frames {
		frames[i] = goDisp(1, true, uint32(i), nil, true, accepted)
	}
	c := &holder{buf: make([]byte, 0, 4096), spare: make([]byte, 0, 4096)}
	oneRange := len(wideAccept(1, 0, 255))
	allocs := testing.AllocsPerRun(100, func() {
		for i, f := range frames {
			c.write(f)
			if i%4 == 3 {
				c.write(transfer2)
				if out, holding := c.take(false); len(out) != len(transfer2) || !holding {
					panic("the range was not held")
				}
			}
		}
		if out, _ := c.take(true); len(out) != oneRange {
			panic("not one range")
		}
	})
	require.Zero(t, allocs)
}

// recordingConn is the socket under a coalescer: it records every write.
type recordingConn struct {
	net.Conn // nil: only what the coalescer calls is implemented

	mu   sync.Mutex
	data bytes.Buffer
}

func newRecordingConn() *recordingConn { return &recordingConn{} }

func (r *recordingConn) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.data.Write(p)
}

func (r *recordingConn) Close() error                     { return nil }
func (r *recordingConn) SetWriteDeadline(time.Time) error { return nil }

func (r *recordingConn) snapshot() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.data.Bytes())
}

func written(rc *recordingConn, want []byte) func() bool {
	return func() bool {
		got := rc.snapshot()
		return bytes.Equal(got, want)
	}
}

// TestHoldInTheFlusher: the flusher writes other sessions' frames at once
// and a held range with the frame of its session that ends it, or on
// Close.
func TestHoldInTheFlusher(t *testing.T) {
	rc := newRecordingConn()
	c := coalesce.New(rc, &folds{}, time.Hour) // only what ends the range writes it
	_, err := c.Write(goDisp(1, true, 0, u32(2), true, accepted))
	require.NoError(t, err)
	_, err = c.Write(transfer2)
	require.NoError(t, err)
	require.Eventually(t, written(rc, transfer2), 5*time.Second, time.Millisecond)
	for id := uint32(3); id < 6; id++ {
		_, err := c.Write(goDisp(1, true, id, nil, true, accepted))
		require.NoError(t, err)
	}
	_, err = c.Write(flow1)
	require.NoError(t, err)
	require.Eventually(t, written(rc, concat(transfer2, wideAccept(1, 0, 5), flow1)), 5*time.Second, time.Millisecond)

	_, err = c.Write(goDisp(1, true, 6, u32(7), true, accepted))
	require.NoError(t, err)
	got := rc.snapshot()
	require.Equal(t, concat(transfer2, wideAccept(1, 0, 5), flow1), got, "held")
	require.NoError(t, c.Close())
	got = rc.snapshot()
	require.Equal(t, concat(transfer2, wideAccept(1, 0, 5), flow1, goDisp(1, true, 6, u32(7), true, accepted)), got,
		"Close writes the held range")
}

// TestHoldIsBounded: a held range goes out holdFor after it began to be
// held, alone, even while it keeps growing.
func TestHoldIsBounded(t *testing.T) {
	rc := newRecordingConn()
	c := coalesce.New(rc, &folds{}, 20*time.Millisecond)
	defer c.Close()
	d01 := goDisp(1, true, 0, u32(1), true, accepted)
	_, err := c.Write(d01)
	require.NoError(t, err)
	require.Eventually(t, written(rc, d01), 5*time.Second, time.Millisecond, "the timer writes it")

	_, err = c.Write(transfer2)
	require.NoError(t, err)
	d23 := goDisp(1, true, 2, u32(3), true, accepted)
	_, err = c.Write(d23)
	require.NoError(t, err)
	require.Eventually(t, written(rc, concat(d01, transfer2, d23)), 5*time.Second, time.Millisecond)

	// A range that grows without end is written all the same.
	_, err = c.Write(goDisp(1, true, 4, u32(5), true, accepted))
	require.NoError(t, err)
	next := uint32(6)
	require.Eventually(t, func() bool {
		if _, err := c.Write(goDisp(1, true, next, nil, true, accepted)); err != nil {
			return false
		}
		next++
		got := rc.snapshot()
		return len(got) > len(concat(d01, transfer2, d23))
	}, 5*time.Second, time.Millisecond)
	require.NoError(t, c.Close())
	got := rc.snapshot()
	as := meaning(t, got)
	require.Len(t, as, int(next)+1)
	for i, a := range as {
		want := int64(i)
		switch {
		case i == 2:
			want = -1 // the transfer
		case i > 2:
			want--
		}
		require.Equal(t, want, a.id, "action %d", i)
	}
}
