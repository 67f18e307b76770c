package amqp091

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/transport"
)

// fakeBroker is the broker's side of one amqp091-go connection over a pipe:
// enough of the handshake for a channel with one consumer, then deliveries
// written as raw frames, so a test can hand amqp091-go any content header.
type fakeBroker struct {
	srv        net.Conn
	conn       *rmq.Connection
	deliveries <-chan rmq.Delivery
	closed     chan *rmq.Error
	tag        uint64
}

func frame(typ byte, channel uint16, payload []byte) []byte {
	out := []byte{typ, byte(channel >> 8), byte(channel)}
	out = binary.BigEndian.AppendUint32(out, uint32(len(payload)))
	out = append(out, payload...)
	return append(out, frameEnd)
}

func method(class, id uint16, args ...byte) []byte {
	p := binary.BigEndian.AppendUint16(nil, class)
	p = binary.BigEndian.AppendUint16(p, id)
	return frame(1, 0, append(p, args...))
}

func onChannel(f []byte) []byte { f[2] = 1; return f }

func shortstr(s string) []byte { return append([]byte{byte(len(s))}, s...) }

func longstr(s []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(s))), s...)
}

// readFrame reads one frame of what the client sends.
func readFrame(r io.Reader) ([]byte, error) {
	var h [7]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(h[3:])+1)
	_, err := io.ReadFull(r, b)
	return b, err
}

// startFake connects amqp091-go to a fake broker, through the guard when
// guarded, and consumes on channel 1.
func startFake(t testing.TB, guarded bool) *fakeBroker {
	t.Helper()
	cli, srv := net.Pipe()
	f := &fakeBroker{srv: srv}
	handshake := make(chan error, 1)
	go func() {
		handshake <- func() error {
			var proto [8]byte
			if _, err := io.ReadFull(srv, proto[:]); err != nil {
				return err
			}
			start := append([]byte{0, 9}, longstr(nil)...)
			start = append(start, longstr([]byte("PLAIN"))...)
			start = append(start, longstr([]byte("en_US"))...)
			steps := []struct {
				reads int
				reply []byte
			}{
				{0, method(10, 10, start...)},
				{1, method(10, 30, 0, 0, 0, 2, 0, 0, 0, 0)}, // start-ok; tune: frame-max 128 KiB
				{2, method(10, 41, shortstr("")...)},        // tune-ok, open
				{1, onChannel(method(20, 11, longstr(nil)...))},
				{1, onChannel(method(60, 21, shortstr("t")...))},
			}
			for _, s := range steps {
				for i := 0; i < s.reads; i++ {
					if _, err := readFrame(srv); err != nil {
						return err
					}
				}
				if _, err := srv.Write(s.reply); err != nil {
					return err
				}
			}
			return nil
		}()
		// What the client sends from now on (its close) is read and
		// ignored.
		_, _ = io.Copy(io.Discard, srv)
	}()
	cfg := rmq.Config{Heartbeat: time.Hour, Dial: func(string, string) (net.Conn, error) {
		if guarded {
			return guard(cli), nil
		}
		return cli, nil
	}}
	conn, err := rmq.DialConfig("amqp://guest:guest@fake/", cfg)
	require.NoError(t, err)
	f.conn = conn
	f.closed = conn.NotifyClose(make(chan *rmq.Error, 1))
	t.Cleanup(func() {
		// The fake never answers a close: the pipe's end ends the
		// connection.
		_ = srv.Close()
		_ = conn.Close()
	})
	ch, err := conn.Channel()
	require.NoError(t, err)
	f.deliveries, err = ch.Consume("q", "t", true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, <-handshake)
	return f
}

// props is a content header's property flags and properties.
func props(flags uint16, fields ...[]byte) []byte {
	out := binary.BigEndian.AppendUint16(nil, flags)
	for _, f := range fields {
		out = append(out, f...)
	}
	return out
}

// withHeaders is the properties of a message with headers (a table's
// encoded fields) and message-id id.
func withHeaders(table []byte, id string) []byte {
	return props(propHeaders|0x0080, longstr(table), shortstr(id))
}

// deliver writes a delivery of body with the properties p (flags first).
func (f *fakeBroker) deliver(t testing.TB, p, body []byte) {
	t.Helper()
	if err := f.write(p, body); err != nil {
		t.Fatalf("write a delivery: %v", err)
	}
}

// write writes a delivery; it fails once the client has closed the
// connection.
func (f *fakeBroker) write(p, body []byte) error {
	f.tag++
	d := append(shortstr("t"), binary.BigEndian.AppendUint64(nil, f.tag)...)
	d = append(d, 0)
	d = append(d, shortstr("")...)
	d = append(d, shortstr("q")...)
	h := binary.BigEndian.AppendUint16(nil, 60)
	h = append(h, 0, 0)
	h = binary.BigEndian.AppendUint64(h, uint64(len(body)))
	h = append(h, p...)
	out := onChannel(method(60, 60, d...))
	out = append(out, frame(frameHeader, 1, h)...)
	if len(body) > 0 {
		out = append(out, frame(3, 1, body)...)
	}
	_, err := f.srv.Write(out)
	return err
}

var errConnClosed = errors.New("the connection closed")

// next is the next delivery, or errConnClosed with amqp091-go's reason.
func (f *fakeBroker) next(t testing.TB) (rmq.Delivery, error) {
	t.Helper()
	select {
	case d, ok := <-f.deliveries:
		if ok {
			return d, nil
		}
		// The consumer ends with its connection.
		return rmq.Delivery{}, fmt.Errorf("%w: %v", errConnClosed, <-f.closed)
	case e := <-f.closed:
		return rmq.Delivery{}, fmt.Errorf("%w: %v", errConnClosed, e)
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery and no close within 10 s")
	}
	return rmq.Delivery{}, nil
}

// Tables of the hostile cases, in 0-9-1's encoding.

func entries(n int) []byte {
	var b []byte
	for i := 0; i < n; i++ {
		b = append(b, shortstr(fmt.Sprintf("k%05d", i))...)
		b = append(b, 'V')
	}
	return b
}

func nestedTables(n int) []byte {
	inner := append(shortstr("leaf"), 'b', 1)
	for i := 0; i < n; i++ {
		inner = append(append(shortstr("t"), 'F'), longstr(inner)...)
	}
	return inner
}

// nestedArrays is n arrays, each the one element of the array around it:
// 5 bytes a level, written outside in.
func nestedArrays(n int) []byte {
	out := shortstr("a")
	for i := 0; i < n; i++ {
		out = append(out, 'A')
		out = binary.BigEndian.AppendUint32(out, uint32(5*(n-i-1)+2))
	}
	return append(out, 'b', 1)
}

func arrayOf(n int) []byte {
	return append(append(shortstr("a"), 'A'), longstr(bytes.Repeat([]byte{'V'}, n))...)
}

type guardCase struct {
	name   string
	props  []byte
	poison string // what the reason says; "" when it passes
}

func guardCases() []guardCase {
	return []guardCase{
		{"8,193 entries", withHeaders(entries(8193), "h"), "more than 8192 entries"},
		{"array of 8,193", withHeaders(arrayOf(8193), "h"), "more than 8192 elements"},
		{"33 nested tables", withHeaders(nestedTables(33), "h"), "nested more than 32"},
		{"20,000 nested arrays", withHeaders(nestedArrays(20000), "h"), "nested more than 32"},
		{"unknown field type", withHeaders(append(shortstr("k"), 'Z', 1), "h"), "unknown type"},
		{"longstr past the table", withHeaders(append(shortstr("k"), 'S', 0, 0, 0, 9, 'x'), "h"), "bytes where"},
		{"message-id cut short", props(0x0080, []byte{9, 'x'}), "message-id cut short"},
		{"table length past the frame", props(propHeaders, []byte{0, 0, 1, 0}), "headers cut short"},
		{"header over 128 KiB", withHeaders(append(shortstr("big"), longstrField(140<<10)...), "h"), "over 131072"},
		{"8,192 entries", withHeaders(entries(8192), "h"), ""},
		{"array of 8,192", withHeaders(arrayOf(8192), "h"), ""},
		{"32 nested tables", withHeaders(nestedTables(32), "h"), ""},
		{"32 nested arrays", withHeaders(nestedArrays(32), "h"), ""},
		{"every field type", withHeaders(everyType(), "h"), ""},
		{"no properties", props(0), ""},
	}
}

func longstrField(n int) []byte { return append([]byte{'S'}, longstr(bytes.Repeat([]byte("x"), n))...) }

func everyType() []byte {
	var b []byte
	add := func(k string, v ...byte) { b = append(append(b, shortstr(k)...), v...) }
	add("t", 't', 1)
	add("B", 'B', 2)
	add("b", 'b', 3)
	add("s", 's', 0, 4)
	add("u", 'u', 0, 5)
	add("I", 'I', 0, 0, 0, 6)
	add("i", 'i', 0, 0, 0, 7)
	add("f", 'f', 0x3f, 0x80, 0, 0)
	add("D", 'D', 2, 0, 0, 0, 125)
	add("l", 'l', 0, 0, 0, 0, 0, 0, 0, 8)
	add("d", 'd', 0x3f, 0xf0, 0, 0, 0, 0, 0, 0)
	add("T", 'T', 0, 0, 0, 0, 0x65, 0x53, 0xf1, 0x00)
	add("S", append([]byte{'S'}, longstr([]byte("str"))...)...)
	add("x", append([]byte{'x'}, longstr([]byte{0, 0xff})...)...)
	add("V", 'V')
	add("A", append([]byte{'A'}, longstr([]byte{'b', 1, 'V', 'S', 0, 0, 0, 0})...)...)
	add("F", append([]byte{'F'}, longstr(append(shortstr("k"), 'b', 1))...)...)
	return b
}

// TestGuardKeepsTheConnection: behind a content header amqp091-go will not
// read, the deliveries that follow on the same connection all arrive, the
// hostile one as a poison mark with its other properties kept; headers at
// the bounds arrive as they were. Without the guard (as on main), amqp091-go
// ends the connection at the hostile header, which is why every delivery in
// flight went back to the queue.
func TestGuardKeepsTheConnection(t *testing.T) {
	f := startFake(t, true)
	for _, c := range guardCases() {
		f.deliver(t, c.props, []byte("first"))
		for i := 0; i < 3; i++ {
			f.deliver(t, withHeaders(append(shortstr("n"), 'b', byte(i)), fmt.Sprint("after-", i)), []byte("ordinary"))
		}
		d, err := f.next(t)
		require.NoError(t, err, c.name)
		require.Equal(t, "first", string(d.Body), c.name)
		reason, isPoison := poisonMark(d.Headers)
		if c.poison == "" {
			require.False(t, isPoison, "%s: poisoned: %s", c.name, reason)
		} else {
			require.True(t, isPoison, "%s: not poisoned", c.name)
			require.Contains(t, reason, c.poison, c.name)
			if bytes.HasPrefix(c.props, withHeaders(nil, "h")[:2]) && c.name != "header over 128 KiB" {
				require.Equal(t, "h", d.MessageId, "%s: the other properties are kept", c.name)
			}
		}
		for i := 0; i < 3; i++ {
			d, err := f.next(t)
			require.NoError(t, err, "%s: delivery %d behind it", c.name, i)
			require.Equal(t, fmt.Sprint("after-", i), d.MessageId, c.name)
			require.Equal(t, rmq.Table{"n": int8(i)}, d.Headers, c.name)
		}
	}

	for _, c := range guardCases() {
		if c.poison == "" || c.name == "header over 128 KiB" {
			// The frame over the frame size fails amqp091-go's own
			// frame check, before it reads any header.
			continue
		}
		u := startFake(t, false)
		_ = u.write(c.props, []byte("first")) // cut short by the close
		_, err := u.next(t)
		require.ErrorIs(t, err, errConnClosed, "%s: amqp091-go alone reads it", c.name)
	}
}

// TestGuardPassesFramesAsTheyCame: what passes the check reaches amqp091-go
// byte for byte, whatever the reads' sizes.
func TestGuardPassesFramesAsTheyCame(t *testing.T) {
	var in []byte
	in = append(in, onChannel(method(60, 60, shortstr("t")...))...)
	in = append(in, frame(frameHeader, 1, append(make([]byte, 12), withHeaders(everyType(), "id")...))...)
	in = append(in, frame(3, 1, bytes.Repeat([]byte("b"), 100_000))...)
	in = append(in, frame(8, 0, nil)...)
	for _, size := range []int{1, 7, 100, 64 << 10} {
		a, b := net.Pipe()
		go func() {
			_, _ = a.Write(in)
			_ = a.Close()
		}()
		g := guard(b)
		var out []byte
		buf := make([]byte, size)
		for {
			n, err := g.Read(buf)
			out = append(out, buf[:n]...)
			if err != nil {
				require.ErrorIs(t, err, io.EOF)
				break
			}
		}
		require.Equal(t, in, out, "reads of %d bytes", size)
		_ = b.Close()
	}
}

// TestPoisonMarkFromAPublisher: a publisher's own mark is a poison message
// too, as on AMQP 1.0; its reason is bounded.
func TestPoisonMarkFromAPublisher(t *testing.T) {
	reason, ok := poisonMark(rmq.Table{transport.PoisonAnnotation: strings.Repeat("r", 1000)})
	require.True(t, ok)
	require.Len(t, reason, maxPoisonReason)
	reason, ok = poisonMark(rmq.Table{transport.PoisonAnnotation: int32(1)})
	require.True(t, ok)
	require.Contains(t, reason, "int32")
	_, ok = poisonMark(rmq.Table{"other": "x"})
	require.False(t, ok)
}

// FuzzGuardHeader is the guard's proof, with amqp091-go as the oracle:
// whatever properties a content header carries, amqp091-go reading through
// the guard delivers it (as it is, or as a poison mark) and the delivery
// behind it, and never ends the connection.
func FuzzGuardHeader(f *testing.F) {
	for _, c := range guardCases() {
		if len(c.props) <= 8<<10 {
			f.Add(c.props)
		}
	}
	f.Add(withHeaders(nestedTables(40), "h"))
	f.Add(withHeaders(arrayOf(10), "h"))
	fb := startFake(f, true)
	f.Fuzz(func(t *testing.T, p []byte) {
		if len(p) < 2 {
			p = append(p, 0, 0)
		}
		fb.deliver(t, p, []byte("x"))
		fb.deliver(t, props(0x0080, shortstr("behind")), []byte("y"))
		d, err := fb.next(t)
		if err != nil {
			t.Fatalf("properties % x: %v", p, err)
		}
		if string(d.Body) != "x" {
			t.Fatalf("properties % x: body %q", p, d.Body)
		}
		if d, err = fb.next(t); err != nil || d.MessageId != "behind" {
			t.Fatalf("properties % x: the delivery behind: %q, %v", p, d.MessageId, err)
		}
	})
}

// TestPlainURL: an amqps URL as amqp091-go is given it once the connector
// does TLS itself, the port kept or made explicit.
func TestPlainURL(t *testing.T) {
	for in, want := range map[string]string{
		"amqps://host/vh":         "amqp://host:5671/vh",
		"amqps://host:5999/":      "amqp://host:5999/",
		"amqps://[::1]/%2F":       "amqp://[::1]:5671/%2F",
		"amqps://h/?heartbeat=10": "amqp://h:5671/?heartbeat=10",
	} {
		got, err := plainURL(in)
		require.NoError(t, err)
		require.Equal(t, want, got, in)
	}
}

// BenchmarkCheckHeader: the check of a typical content header (a few
// properties and headers).
func BenchmarkCheckHeader(b *testing.B) {
	table := append(shortstr("x-trace"), append([]byte{'S'}, longstr([]byte("0af7651916cd43dd8448eb211c80319c"))...)...)
	table = append(table, append(shortstr("n"), 'I', 0, 0, 0, 42)...)
	p := append(make([]byte, 12), props(propContentType|propHeaders|0x1000|0x0080,
		shortstr("application/json"), longstr(table), []byte{2}, shortstr("id-1"))...)
	b.ReportAllocs()
	for b.Loop() {
		if c := checkHeader(p); c.reason != "" {
			b.Fatal(c.reason)
		}
	}
}
