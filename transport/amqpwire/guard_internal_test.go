package amqpwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"strings"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/internal/amqpscan"
	"github.com/amqpactor/amqpactor/transport"
)

// A small encoder of the frames a peer sends, enough for the guard.

var (
	amqpHeader = []byte{'A', 'M', 'Q', 'P', 0, 1, 0, 0}
	saslHeader = []byte{'A', 'M', 'Q', 'P', 3, 1, 0, 0}
)

// frame encodes a frame of type typ on channel ch with body.
func frame(typ byte, ch uint16, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
	b = append(b, 2, typ)
	b = binary.BigEndian.AppendUint16(b, ch)
	return append(b, body...)
}

// performative encodes a described list with descriptor code and the
// already encoded fields, as list8 when it fits and list32 otherwise.
func performative(code byte, fields ...[]byte) []byte {
	var content []byte
	for _, f := range fields {
		content = append(content, f...)
	}
	b := []byte{0x00, 0x53, code}
	if len(content)+1 < 256 && len(fields) < 256 {
		b = append(b, 0xc0, byte(len(content)+1), byte(len(fields)))
	} else {
		b = append(b, 0xd0)
		b = binary.BigEndian.AppendUint32(b, uint32(len(content)+4))
		b = binary.BigEndian.AppendUint32(b, uint32(len(fields)))
	}
	return append(b, content...)
}

func encUint(v uint32) []byte {
	switch {
	case v == 0:
		return []byte{0x43}
	case v < 256:
		return []byte{0x52, byte(v)}
	}
	return binary.BigEndian.AppendUint32([]byte{0x70}, v)
}

func encBool(v bool) []byte {
	if v {
		return []byte{0x41}
	}
	return []byte{0x42}
}

func encBin(v []byte) []byte { return append([]byte{0xa0, byte(len(v))}, v...) }

func encSym(s string) []byte { return append([]byte{0xa3, byte(len(s))}, s...) }

func encStr(s string) []byte { return append([]byte{0xa1, byte(len(s))}, s...) }

var null = []byte{0x40}

type xfer struct {
	handle, id       uint32
	more, aborted    bool
	continuation     bool // leave delivery-id, tag and format out
	settled, batched bool
}

// transferFrame is a transfer frame on ch with payload.
func transferFrame(ch uint16, x xfer, payload []byte) []byte {
	fields := [][]byte{encUint(x.handle)}
	if x.continuation {
		fields = append(fields, null, null, null)
	} else {
		fields = append(fields, encUint(x.id), encBin([]byte{byte(x.id), byte(x.id >> 8)}), encUint(0))
	}
	fields = append(fields, encBool(x.settled), encBool(x.more))
	if x.aborted || x.batched {
		fields = append(fields, null, null, null, encBool(x.aborted))
	}
	return frame(0, ch, append(performative(0x14, fields...), payload...))
}

func flowFrame(ch uint16) []byte {
	return frame(0, ch, performative(0x13, encUint(1), encUint(100), encUint(0), encUint(100)))
}

func detachFrame(ch uint16, handle uint32) []byte {
	return frame(0, ch, performative(0x16, encUint(handle), encBool(true)))
}

func openFrame(caps ...string) []byte {
	fields := [][]byte{encStr("broker"), encStr("host"), encUint(65536), {0x60, 0, 255}, encUint(60000), null, null}
	switch len(caps) {
	case 0:
	case 1:
		fields = append(fields, encSym(caps[0]))
	default:
		arr := []byte{}
		for _, c := range caps {
			arr = append(arr, byte(len(c)))
			arr = append(arr, c...)
		}
		// array8: size, count, element constructor, elements
		a := []byte{0xe0, byte(len(arr) + 2), byte(len(caps)), 0xa3}
		fields = append(fields, append(a, arr...))
	}
	return frame(0, 0, performative(0x10, fields...))
}

// message encodes an AMQP message with a data body.
func message(body string) []byte {
	b := []byte{0x00, 0x53, 0x75, 0xb0}
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	return append(b, body...)
}

// scriptConn plays the socket: it returns its bytes at most chunk at a time,
// then err (io.EOF when nil).
type scriptConn struct {
	net.Conn
	data  []byte
	chunk int
	err   error
}

func (s *scriptConn) Read(p []byte) (int, error) {
	if len(s.data) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		return 0, io.EOF
	}
	n := min(len(p), len(s.data), s.chunk)
	copy(p, s.data[:n])
	s.data = s.data[n:]
	return n, nil
}

// rejectBad fails every payload that contains "BAD".
func rejectBad(p []byte) error {
	if i := bytes.Index(p, []byte("BAD")); i >= 0 {
		return &amqpscan.Error{Offset: i, Reason: "BAD in the payload"}
	}
	return nil
}

func newTestGuard(data []byte, chunk int, maxMessage uint64) *guard {
	return newGuard(&scriptConn{data: data, chunk: chunk}, maxMessage, rejectBad)
}

// readAll reads what the guard hands on, in reads of size n, until an error.
func readAll(g *guard, n int) ([]byte, error) {
	var out []byte
	p := make([]byte, n)
	for {
		k, err := g.Read(p)
		out = append(out, p[:k]...)
		if err != nil {
			return out, err
		}
	}
}

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// outFrame is one frame of the guard's output, split.
type outFrame struct {
	channel uint16
	perf    []byte // from the descriptor to the payload
	payload []byte
}

// splitFrames parses out (after the AMQP header) into frames, taking each
// transfer's performative length from the guard's own parser.
func splitFrames(t *testing.T, out []byte) []outFrame {
	t.Helper()
	require.True(t, bytes.HasPrefix(out, amqpHeader), "output starts with the AMQP header")
	out = out[8:]
	var fs []outFrame
	for len(out) > 0 {
		require.GreaterOrEqual(t, len(out), 8)
		size := int(binary.BigEndian.Uint32(out))
		require.LessOrEqual(t, size, len(out), "frame size within the output")
		f := out[:size]
		out = out[size:]
		body := f[8:]
		of := outFrame{channel: binary.BigEndian.Uint16(f[6:]), perf: body}
		if len(body) > 3 && body[2] == 0x14 {
			tf, err := parseTransfer(body[3:])
			require.NoError(t, err)
			of.perf, of.payload = body[:3+tf.end], body[3+tf.end:]
		}
		fs = append(fs, of)
	}
	return fs
}

func TestGuardPassesSingleFramesUnchanged(t *testing.T) {
	in := concat(amqpHeader, openFrame(), frame(0, 0, nil), // a heartbeat
		transferFrame(0, xfer{handle: 0, id: 1}, message("one")),
		flowFrame(0),
		transferFrame(1, xfer{handle: 300, id: 70000, settled: true}, message(strings.Repeat("x", 1000))),
		transferFrame(0, xfer{handle: 0, id: 2, batched: true}, nil),
	)
	for _, chunk := range []int{1, 7, 64, 1 << 20} {
		for _, readSize := range []int{1, 13, 512, 1 << 16} {
			g := newTestGuard(in, chunk, 0)
			out, err := readAll(g, readSize)
			require.ErrorIs(t, err, io.EOF)
			require.Equal(t, in, out, "chunk %d, read size %d", chunk, readSize)
		}
	}
}

func TestGuardSASLAndPeerCapabilities(t *testing.T) {
	mechs := frame(1, 0, performative(0x40, encSym("PLAIN")))
	outcome := frame(1, 0, performative(0x44, []byte{0x50, 0}))
	prefix := concat(saslHeader, mechs, outcome, amqpHeader, openFrame("ANONYMOUS-RELAY", "SHARED-SUBS"))
	in := concat(prefix, transferFrame(0, xfer{id: 1}, message("BAD")))
	g := newTestGuard(in, 5, 0)
	out, err := readAll(g, 512)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, prefix, out[:len(prefix)], "SASL and the open pass unchanged")
	require.True(t, g.PeerOffers("ANONYMOUS-RELAY"))
	require.True(t, g.PeerOffers("SHARED-SUBS"))
	require.False(t, g.PeerOffers("DELAYED-DELIVERY"))
	require.Equal(t, 256, g.PeerSessions(), "channel-max 255: channels 0 to 255")

	// The transfer after SASL was followed as AMQP: it is poison.
	fs := splitFrames(t, out[len(saslHeader)+len(mechs)+len(outcome):])
	m := decode(t, fs[len(fs)-1].payload)
	reason, ok := transport.Poison(m)
	require.True(t, ok)
	require.Contains(t, reason, "BAD in the payload")

	// One symbol instead of an array.
	g = newTestGuard(concat(amqpHeader, openFrame("ANONYMOUS-RELAY")), 1<<20, 0)
	_, _ = readAll(g, 512)
	require.True(t, g.PeerOffers("ANONYMOUS-RELAY"))

	// An open that stops before channel-max allows the default.
	short := frame(0, 0, performative(0x10, encStr("broker"), encStr("host")))
	g = newTestGuard(concat(amqpHeader, short), 1<<20, 0)
	_, _ = readAll(g, 512)
	require.Equal(t, 65536, g.PeerSessions())
}

func decode(t *testing.T, payload []byte) *amqp.Message {
	t.Helper()
	var m amqp.Message
	require.NoError(t, m.UnmarshalBinary(payload))
	return &m
}

// TestGuardMultiFrame: every frame of a multi-frame delivery goes on with
// its performative unchanged; the payload is whole in the last frame; other
// links' and sessions' frames keep their places.
func TestGuardMultiFrame(t *testing.T) {
	big := message(strings.Repeat("abcdefgh", 100))
	parts := [][]byte{big[:300], big[300:600], big[600:]}
	other := message("other link")
	in := concat(amqpHeader,
		transferFrame(0, xfer{handle: 0, id: 1, more: true}, parts[0]),
		transferFrame(0, xfer{handle: 1, id: 2, more: true}, other[:5]), // another link of the session
		flowFrame(0),
		transferFrame(0, xfer{handle: 0, continuation: true, more: true}, parts[1]),
		transferFrame(2, xfer{handle: 0, id: 1}, message("other session")),
		transferFrame(0, xfer{handle: 1, continuation: true}, other[5:]),
		transferFrame(0, xfer{handle: 0, continuation: true}, parts[2]),
	)
	g := newTestGuard(in, 11, 0)
	out, err := readAll(g, 100)
	require.ErrorIs(t, err, io.EOF)
	want := splitFrames(t, in)
	got := splitFrames(t, out)
	require.Len(t, got, len(want), "frame count")
	for i := range want {
		require.Equal(t, want[i].channel, got[i].channel, "frame %d", i)
		require.Equal(t, want[i].perf, got[i].perf, "frame %d: performative", i)
	}
	for _, i := range []int{0, 1, 3} {
		require.Empty(t, got[i].payload, "frame %d: a frame with more=true goes on empty", i)
	}
	require.Equal(t, big, got[6].payload)
	require.Equal(t, other, got[5].payload)
	require.Equal(t, want[4].payload, got[4].payload)
	require.Empty(t, g.deliveries)
}

// TestGuardPoison: a delivery that fails the check arrives as the same
// frames with the poison message on the last one.
func TestGuardPoison(t *testing.T) {
	bad := message(strings.Repeat("-", 200) + "BAD" + strings.Repeat("-", 200))
	in := concat(amqpHeader,
		transferFrame(0, xfer{handle: 0, id: 1, more: true}, bad[:100]),
		transferFrame(0, xfer{handle: 0, continuation: true, more: true}, bad[100:300]), // BAD is split
		transferFrame(0, xfer{handle: 0, continuation: true}, bad[300:]),
		transferFrame(0, xfer{handle: 0, id: 2}, message("fine")),
		transferFrame(0, xfer{handle: 0, id: 3}, message("BAD alone")),
	)
	g := newTestGuard(in, 1<<20, 0)
	out, err := readAll(g, 4096)
	require.ErrorIs(t, err, io.EOF)
	want, got := splitFrames(t, in), splitFrames(t, out)
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, want[i].perf, got[i].perf, "frame %d: performative", i)
	}
	require.Empty(t, got[0].payload)
	require.Empty(t, got[1].payload)
	for _, i := range []int{2, 4} {
		m := decode(t, got[i].payload)
		reason, ok := transport.Poison(m)
		require.True(t, ok, "frame %d is poison", i)
		require.Contains(t, reason, "BAD in the payload")
	}
	require.Equal(t, message("fine"), got[3].payload)
}

func TestGuardOverSize(t *testing.T) {
	const max = 1000
	big := message(strings.Repeat("y", 1500))
	in := concat(amqpHeader,
		transferFrame(0, xfer{handle: 0, id: 1, more: true}, big[:600]),
		transferFrame(0, xfer{handle: 0, continuation: true, more: true}, big[600:1200]),
		transferFrame(0, xfer{handle: 0, continuation: true}, big[1200:]),
		transferFrame(0, xfer{handle: 0, id: 2}, big),                    // single frame, over
		transferFrame(0, xfer{handle: 0, id: 3}, message("just fits")),   // passes
		transferFrame(0, xfer{handle: 0, id: 4}, make([]byte, max)),      // exactly the max: checked, passes
		transferFrame(0, xfer{handle: 0, id: 5, more: true}, big[:600]),  // multi-frame within the max
		transferFrame(0, xfer{handle: 0, continuation: true}, big[:300]), // 900 bytes
	)
	g := newTestGuard(in, 1<<20, max)
	out, err := readAll(g, 4096)
	require.ErrorIs(t, err, io.EOF)
	got := splitFrames(t, out)
	require.Len(t, got, 8)
	require.Empty(t, got[0].payload)
	require.Empty(t, got[1].payload)
	for _, i := range []int{2, 3} {
		reason, ok := transport.Poison(decode(t, got[i].payload))
		require.True(t, ok, "frame %d", i)
		require.Contains(t, reason, "exceeds the max message size of 1000 bytes")
	}
	require.Equal(t, message("just fits"), got[4].payload)
	require.Len(t, got[5].payload, max)
	require.Equal(t, concat(big[:600], big[:300]), got[7].payload)
}

func TestGuardAbortedAndDetached(t *testing.T) {
	in := concat(amqpHeader,
		transferFrame(0, xfer{handle: 0, id: 1, more: true}, message("BAD start")),
		transferFrame(0, xfer{handle: 0, continuation: true, aborted: true}, nil),
		transferFrame(0, xfer{handle: 0, id: 2}, message("after the abort")),
		transferFrame(0, xfer{handle: 1, id: 3, more: true}, message("BAD, then the link ends")),
		detachFrame(0, 1),
		transferFrame(0, xfer{handle: 1, id: 1}, message("a new link with the same handle")),
	)
	g := newTestGuard(in, 1<<20, 0)
	out, err := readAll(g, 4096)
	require.ErrorIs(t, err, io.EOF)
	want, got := splitFrames(t, in), splitFrames(t, out)
	require.Len(t, got, len(want))
	require.Equal(t, want[1], got[1], "the aborting frame goes on as it came")
	require.Equal(t, want[2], got[2])
	require.Equal(t, want[4], got[4])
	require.Equal(t, want[5], got[5], "a detach forgets the link's delivery in progress")
	require.Empty(t, g.deliveries)
}

func TestGuardRefusesWhatItCannotFollow(t *testing.T) {
	okFrame := transferFrame(0, xfer{id: 1}, message("fine"))
	cases := []struct {
		name string
		in   []byte
		want string
	}{
		{"a 4 GB frame size", concat(amqpHeader, []byte{0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0}), "exceeds the max-frame-size"},
		{"a frame one byte over the max", concat(amqpHeader, binary.BigEndian.AppendUint32(nil, guardMaxFrameSize+1), []byte{2, 0, 0, 0}), "exceeds the max-frame-size"},
		{"a frame size below the header", concat(amqpHeader, []byte{0, 0, 0, 4, 2, 0, 0, 0}), "below the 8-byte header"},
		{"garbage after the header", concat(amqpHeader, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")), "max-frame-size"},
		{"garbage instead of the header", []byte("HTTP/1.1 400 Bad Request\r\n"), "expected an AMQP protocol header"},
		{"a second AMQP header mid-stream", concat(amqpHeader, okFrame, amqpHeader), "max-frame-size"},
		{"an extended header", concat(amqpHeader, func() []byte { f := frame(0, 0, append([]byte{0, 0, 0, 0}, okFrame[8:]...)); f[4] = 3; return f }()), "data offset 3"},
		{"a transfer with list0", concat(amqpHeader, frame(0, 0, []byte{0, 0x53, 0x14, 0x45})), "no handle"},
		{"a transfer with a null handle", concat(amqpHeader, frame(0, 0, performative(0x14, null))), "no handle"},
		{"a transfer with 12 fields", concat(amqpHeader, frame(0, 0, performative(0x14, encUint(0), null, null, null, null, null, null, null, null, null, null, null))), "12 fields"},
		{"a transfer with a delivery state", concat(amqpHeader, frame(0, 0, performative(0x14, encUint(0), encUint(1), encBin([]byte{1}), encUint(0), null, null, null, []byte{0, 0x53, 0x24, 0x45}))), "delivery state"},
		{"a transfer whose list hides bytes", concat(amqpHeader, frame(0, 0, []byte{0, 0x53, 0x14, 0xc0, 10, 1, 0x43, 0, 0, 0, 0, 0, 0, 0, 0})), "do not take"},
		{"a transfer list larger than the frame", concat(amqpHeader, frame(0, 0, []byte{0, 0x53, 0x14, 0xd0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0x43})), "beyond the frame"},
		{"a transfer with a wrongly typed handle", concat(amqpHeader, frame(0, 0, performative(0x14, encStr("h")))), "want a uint"},
		{"a truncated tag", concat(amqpHeader, frame(0, 0, []byte{0, 0x53, 0x14, 0xc0, 4, 3, 0x43, 0x43, 0xa0, 0xff})), "beyond the list"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newTestGuard(c.in, 3, 0)
			_, err := readAll(g, 512)
			var ge *GuardError
			require.True(t, errors.As(err, &ge), "want a GuardError, got %v", err)
			require.Contains(t, ge.Error(), c.want)
			require.LessOrEqual(t, cap(g.buf), guardMaxFrameSize+1024, "nothing large was allocated")
			// The error is sticky.
			_, err2 := g.Read(make([]byte, 10))
			require.Equal(t, err, err2)
		})
	}
}

// TestGuardTruncatedFrame: a frame cut short by the end of the stream is
// never handed on in part; go-amqp sees the socket's error after the whole
// frames.
func TestGuardTruncatedFrame(t *testing.T) {
	whole := transferFrame(0, xfer{id: 1}, message("whole"))
	cut := transferFrame(0, xfer{id: 2}, message("cut short"))
	in := concat(amqpHeader, whole, cut[:len(cut)-3])
	g := newTestGuard(in, 4, 0)
	out, err := readAll(g, 512)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, concat(amqpHeader, whole), out)

	g = newGuard(&scriptConn{data: concat(amqpHeader, cut[:20]), chunk: 100, err: net.ErrClosed}, 0, rejectBad)
	out, err = readAll(g, 512)
	require.ErrorIs(t, err, net.ErrClosed)
	require.Equal(t, amqpHeader, out)
}

// TestGuardDefaultCheck: without an injected check the guard uses the
// payload scanner with the connection's max message size.
func TestGuardDefaultCheck(t *testing.T) {
	in := concat(amqpHeader, transferFrame(0, xfer{id: 1}, message("fine")))
	g := newGuard(&scriptConn{data: in, chunk: 1 << 20}, 0, nil)
	require.Equal(t, uint64(DefaultMaxMessageSize), g.maxMessage)
	out, err := readAll(g, 512)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, in, out)
}

// loopConn returns the same frame for ever.
type loopConn struct {
	net.Conn
	frame []byte
	off   int
}

func (l *loopConn) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], l.frame[l.off:])
		n += c
		l.off = (l.off + c) % len(l.frame)
	}
	return n, nil
}

// TestGuardSingleFrameAllocs: the hot path, a single-frame transfer that
// passes, allocates nothing.
func TestGuardSingleFrameAllocs(t *testing.T) {
	f := transferFrame(3, xfer{handle: 2, id: 9}, message(strings.Repeat("z", 300)))
	g := newGuard(&loopConn{frame: f}, 0, func([]byte) error { return nil })
	g.expectHeader = false
	p := make([]byte, 64<<10)
	_, err := g.Read(p) // let the buffer reach its size
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := g.Read(p); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}

func BenchmarkGuardSingleFrame(b *testing.B) {
	f := transferFrame(3, xfer{handle: 2, id: 9}, message(strings.Repeat("z", 1000)))
	g := newGuard(&loopConn{frame: f}, 0, func([]byte) error { return nil })
	g.expectHeader = false
	p := make([]byte, 64<<10)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Read(p); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzGuard: whatever follows the protocol header, the guard neither panics
// nor hands on more than it read, and what it hands on parses as frames.
func FuzzGuard(f *testing.F) {
	f.Add(transferFrame(0, xfer{id: 1}, message("x")))
	f.Add(concat(transferFrame(0, xfer{id: 1, more: true}, message("BAD")), transferFrame(0, xfer{continuation: true}, nil)))
	f.Add(openFrame("A", "B"))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0})
	f.Add(dispositionFrame(0, true, 3, u32(9)))
	f.Add(dispositionFrame(1, false, 0, u32(math.MaxUint32)))
	f.Fuzz(func(t *testing.T, data []byte) {
		g := newGuard(&scriptConn{data: concat(amqpHeader, data), chunk: 7}, 200, rejectBad)
		out, _ := readAll(g, 100)
		require.True(t, bytes.HasPrefix(out, amqpHeader))
		rest := out[8:]
		for len(rest) > 0 {
			require.GreaterOrEqual(t, len(rest), 8)
			size := int(binary.BigEndian.Uint32(rest))
			require.GreaterOrEqual(t, size, 8)
			require.LessOrEqual(t, size, len(rest))
			rest = rest[size:]
		}
		_ = g.PeerOffers("x")
	})
}

// TestGuardPerformativeKeys: a map key go-amqp would panic on, anywhere in a
// performative other than a transfer, ends the connection instead; ordinary
// performatives pass.
func TestGuardPerformativeKeys(t *testing.T) {
	listKey := []byte{0xc1, 5, 2, 0xc0, 1, 0, 0x40} // map8 {list0-as-list8: null}
	modified := func(annotations []byte) []byte {
		// disposition: role receiver, first 0, last null, settled true, state modified{failed, undeliverable, annotations}
		state := append([]byte{0x00, 0x53, 0x27}, compound8(0xc0, encBool(true), encBool(false), annotations)...)
		return frame(0, 0, performative(0x15, encBool(true), encUint(0), null, encBool(true), state))
	}
	ok := [][]byte{
		openFrame("A"),
		flowFrame(0),
		detachFrame(0, 3),
		modified(compound8(0xc1, encSym("x-opt-k"), encStr("v"))),
		// attach with an unsettled map keyed by delivery-tags (binary)
		frame(0, 0, performative(0x12, encStr("link"), encUint(0), encBool(false), null, null, null, null,
			compound8(0xc1, encBin([]byte{1, 2}), null))),
		// an array of maps with boolean keys in properties
		frame(0, 0, performative(0x11, null, encUint(0), encUint(10), encUint(10), null, null, null,
			compound8(0xc1, encSym("p"), []byte{0xe0, 8, 2, 0xc1, 3, 2, 0x41, 0x42, 1, 0}))),
	}
	for i, f := range ok {
		in := concat(amqpHeader, f)
		out, err := readAll(newTestGuard(in, 3, 0), 512)
		require.ErrorIs(t, err, io.EOF, "frame %d", i)
		require.Equal(t, in, out, "frame %d", i)
	}
	bad := map[string][]byte{
		"modified annotations with a list key":   modified(listKey),
		"modified annotations with a binary key": modified(compound8(0xc1, encBin([]byte("k")), null)),
		"a map key in open properties, nested":   frame(0, 0, performative(0x10, encStr("c"), null, null, null, null, null, null, null, null, compound8(0xc1, encSym("p"), listKey))),
		"a described key in end's error info": frame(0, 0, performative(0x17, append([]byte{0x00, 0x53, 0x1d},
			compound8(0xc0, encSym("amqp:internal-error"), encStr("d"), compound8(0xc1, []byte{0x00, 0x53, 0x01, 0x40}, null))...))),
		"an attach's unsettled map with a list key": frame(0, 0, performative(0x12, encStr("link"), encUint(0), encBool(false), null, null, null, null, listKey)),
		"an array of maps with a list key":          frame(0, 0, performative(0x11, null, encUint(0), encUint(10), encUint(10), null, null, null, compound8(0xc1, encSym("p"), []byte{0xe0, 6, 1, 0xc1, 3, 2, 0x45, 0x40}))),
		"nested past the bound":                     frame(0, 0, performative(0x10, encStr("c"), null, null, null, null, null, null, null, null, nestedLists(70))),
		"an unknown constructor":                    frame(0, 0, performative(0x13, []byte{0x99})),
	}
	for name, f := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := readAll(newTestGuard(concat(amqpHeader, f), 5, 0), 512)
			var ge *GuardError
			require.True(t, errors.As(err, &ge), "want a GuardError, got %v", err)
			t.Log(ge)
			require.NotContains(t, ge.Error(), "truncated")
		})
	}
}

// compound8 encodes a list8 (0xc0) or map8 (0xc1) of the encoded items.
func compound8(code byte, items ...[]byte) []byte {
	content := concat(items...)
	return append([]byte{code, byte(len(content) + 1), byte(len(items))}, content...)
}

func nestedLists(n int) []byte {
	b := []byte{0x45}
	for i := 0; i < n; i++ {
		b = append([]byte{0xc0, byte(len(b) + 1), 1}, b...)
	}
	return b
}

// dispositionFrame settles first..last (last nil: first alone) as accepted;
// receiver says the peer is the receiver of the deliveries.
func dispositionFrame(ch uint16, receiver bool, first uint32, last *uint32) []byte {
	lastField := null
	if last != nil {
		lastField = encUint(*last)
	}
	accepted := []byte{0x00, 0x53, 0x24, 0x45}
	return frame(0, ch, performative(0x15, encBool(receiver), encUint(first), lastField, encBool(true), accepted))
}

// TestGuardDispositionRanges: a disposition go-amqp would walk for ever, or
// for longer than maxDispositionRange ids, ends the connection; the peer is
// then told why in go-amqp's close, as amqp:connection:framing-error.
func TestGuardDispositionRanges(t *testing.T) {
	ok := [][]byte{
		dispositionFrame(0, true, 7, nil),
		dispositionFrame(0, true, 0, u32(maxDispositionRange-1)),
		dispositionFrame(1, false, 100, u32(100)),
		// Wraps through 4294967295: serial-number width 21. go-amqp's loop
		// does not run for it, so it costs nothing.
		dispositionFrame(0, true, math.MaxUint32-15, u32(5)),
		dispositionFrame(0, true, math.MaxUint32-1, nil),
	}
	for i, f := range ok {
		in := concat(amqpHeader, f)
		out, err := readAll(newTestGuard(in, 3, 0), 512)
		require.ErrorIs(t, err, io.EOF, "frame %d", i)
		require.Equal(t, in, out, "frame %d", i)
	}
	bad := map[string][]byte{
		"the whole id space":          dispositionFrame(0, true, 0, u32(math.MaxUint32)),
		"one id past the bound":       dispositionFrame(0, false, 0, u32(maxDispositionRange)),
		"last below first":            dispositionFrame(0, true, 5, u32(0)),
		"4294967295 alone":            dispositionFrame(0, true, math.MaxUint32, nil),
		"a short range to 4294967295": dispositionFrame(0, true, math.MaxUint32-3, u32(math.MaxUint32)),
		"a list32 field list": frame(0, 2, []byte{0x00, 0x53, 0x15, 0xd0, 0, 0, 0, 15, 0, 0, 0, 3,
			0x41, 0x70, 0, 0, 0, 1, 0x70, 0x7f, 0xff, 0xff, 0xff}),
	}
	for name, f := range bad {
		t.Run(name, func(t *testing.T) {
			out, err := readAll(newTestGuard(concat(amqpHeader, openFrame(), f), 5, 0), 512)
			var ge *GuardError
			require.True(t, errors.As(err, &ge), "want a GuardError, got %v", err)
			require.Contains(t, ge.Reason, "disposition on channel")
			require.Contains(t, ge.Error(), framingError)
			require.Equal(t, concat(amqpHeader, openFrame()), out, "nothing of the disposition reaches go-amqp")
		})
	}
}

// recordConn records what is written to it.
type recordConn struct {
	net.Conn
	written bytes.Buffer
}

func (r *recordConn) Write(p []byte) (int, error) { return r.written.Write(p) }

// TestGuardTellsThePeer: after a refusal the bare close go-amqp writes goes
// out carrying the framing error and the reason; before it, and every other
// frame, goes out as written.
func TestGuardTellsThePeer(t *testing.T) {
	rec := &recordConn{}
	g := newGuard(rec, 0, rejectBad)
	bareClose := frame(0, 0, performative(0x18))
	flow := flowFrame(0)
	for _, f := range [][]byte{flow, bareClose} {
		n, err := g.Write(f)
		require.NoError(t, err)
		require.Equal(t, len(f), n)
	}
	require.Equal(t, concat(flow, bareClose), rec.written.Bytes(), "nothing refused: frames go out as written")

	rec.written.Reset()
	g.failed.Store(&GuardError{Offset: 8, Reason: "disposition on channel 0: " + strings.Repeat("é", 300)})
	for _, f := range [][]byte{flow, bareClose} {
		n, err := g.Write(f)
		require.NoError(t, err)
		require.Equal(t, len(f), n)
	}
	out := rec.written.Bytes()
	require.True(t, bytes.HasPrefix(out, flow))
	// 200 bytes of the reason: "disposition on channel 0: " and 87 é.
	desc := "disposition on channel 0: " + strings.Repeat("é", 87)
	errInfo := append([]byte{0x00, 0x53, 0x1d}, compound8(0xc0, encSym(framingError), encStr(desc))...)
	require.Equal(t, frame(0, 0, performative(0x18, errInfo)), out[len(flow):])
}
