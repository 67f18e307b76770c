package framecount

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// frame builds a type-typ frame on channel ch whose body is body.
func frame(typ byte, ch uint16, body []byte) []byte {
	b := make([]byte, 8, 8+len(body))
	binary.BigEndian.PutUint32(b, uint32(8+len(body)))
	b[4], b[5] = 2, typ
	binary.BigEndian.PutUint16(b[6:], ch)
	return append(b, body...)
}

func perf(code byte, fields ...byte) []byte {
	return append([]byte{0x00, 0x53, code, 0xc0, byte(1 + len(fields)), 1}, fields...)
}

// A recorded client stream: the frames go-amqp writes for a SASL
// ANONYMOUS open, a sender's first transfer and a receiver's disposition
// (bodies trimmed to their first fields, which is all the parser reads).
func stream() []byte {
	var s []byte
	s = append(s, "AMQP\x03\x01\x00\x00"...)
	s = append(s, frame(1, 0, []byte{0x00, 0x53, 0x41, 0xc0, 0x0c, 0x01, 0xa3, 0x09, 'A', 'N', 'O', 'N', 'Y', 'M', 'O', 'U', 'S'})...)
	s = append(s, "AMQP\x00\x01\x00\x00"...)
	s = append(s, frame(0, 0, perf(0x10, 0xa1, 0x00))...)                                    // open
	s = append(s, frame(0, 0, perf(0x11, 0x40))...)                                          // begin
	s = append(s, frame(0, 0, perf(0x12, 0xa1, 0x00))...)                                    // attach
	s = append(s, frame(0, 0, perf(0x13, 0x43))...)                                          // flow
	s = append(s, frame(0, 0, append(perf(0x14, 0x43), bytes.Repeat([]byte{7}, 100)...))...) // transfer + payload
	s = append(s, frame(0, 1, perf(0x15, 0x41))...)                                          // disposition
	s = append(s, frame(0, 0, nil)...)                                                       // heartbeat
	// A detach with an ulong descriptor after a 4-byte extended header
	// (doff 3): 8 + 4 + 10 bytes.
	s = append(s, 0, 0, 0, 22, 3, 0, 0, 0, 0xee, 0xee, 0xee, 0xee)
	s = append(s, 0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x16)
	return s
}

func TestParserCountsAStreamInAnyChunking(t *testing.T) {
	s := stream()
	want := Counts{Bytes: int64(len(s))}
	want.Units[Header] = 2
	want.Units[SASL] = 1
	for _, k := range []Kind{Open, Begin, Attach, Flow, Transfer, Disposition, Empty, Detach} {
		want.Units[k] = 1
	}
	for _, chunk := range []int{1, 2, 3, 7, 8, 9, 64, len(s)} {
		p := NewParser()
		for b := s; len(b) > 0; {
			n := min(chunk, len(b))
			_, _ = p.Write(b[:n])
			b = b[n:]
		}
		require.Equal(t, want, p.Counts(), "chunk %d", chunk)
		require.EqualValues(t, 9, p.Counts().Frames())
	}
}

func TestParserStopsOnGarbage(t *testing.T) {
	p := NewParser()
	_, _ = p.Write(frame(0, 0, perf(0x18)))                 // close
	_, _ = p.Write([]byte{0, 0, 0, 4, 2, 0, 0, 0, 1, 2, 3}) // size 4 < 8
	c := p.Counts()
	require.EqualValues(t, 1, c.Units[Close])
	require.EqualValues(t, 11, c.Unparsed)
	require.EqualValues(t, 11+int64(len(frame(0, 0, perf(0x18)))), c.Bytes)
}

func TestParserOtherBodies(t *testing.T) {
	p := NewParser()
	_, _ = p.Write(frame(0, 0, []byte{0x00, 0x53, 0x70, 0x45}))   // a descriptor out of range
	_, _ = p.Write(frame(0, 0, []byte{0x00, 0xa3, 1, 'x', 0x45})) // a symbolic descriptor
	_, _ = p.Write(frame(1, 0, perf(0x15)))                       // a disposition code in a SASL frame
	require.EqualValues(t, 3, p.Counts().Units[Other])
}

func TestProxyCountsBothDirections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	echoed := make(chan struct{})
	go func() {
		defer close(echoed)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c) // the "broker" echoes
	}()
	p, err := Listen(ln.Addr().String())
	require.NoError(t, err)
	s := frame(0, 3, perf(0x15, 0x41))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", p.Addr())
	require.NoError(t, err)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Write(s)
	require.NoError(t, err)
	got := make([]byte, len(s))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, s, got)
	up, down := p.Counts()
	require.EqualValues(t, 1, up.Units[Disposition])
	require.EqualValues(t, 1, down.Units[Disposition])
	require.EqualValues(t, len(s), up.Bytes)
	require.NoError(t, c.Close())
	require.NoError(t, p.Close())
	<-echoed
}
