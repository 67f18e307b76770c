package coalesce

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// recordingConn is the socket under a Conn: it records every
// write, and a write can be held at a gate to play a slow socket.
type recordingConn struct {
	net.Conn // nil: only what Conn calls is implemented

	mu      sync.Mutex
	data    bytes.Buffer
	writes  int
	err     error         // returned by every write when set
	gate    chan struct{} // when non-nil, each write waits for a receive... or for Close
	entered chan struct{} // a write has started (cap 1)
	closed  chan struct{}
	once    sync.Once
}

func newRecordingConn() *recordingConn {
	return &recordingConn{entered: make(chan struct{}, 1), closed: make(chan struct{})}
}

func (r *recordingConn) Write(p []byte) (int, error) {
	select {
	case r.entered <- struct{}{}:
	default:
	}
	r.mu.Lock()
	gate, err := r.gate, r.err
	r.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-r.closed:
			return 0, net.ErrClosed
		}
	}
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes++
	return r.data.Write(p)
}

func (r *recordingConn) Close() error {
	r.once.Do(func() { close(r.closed) })
	return nil
}

func (r *recordingConn) SetWriteDeadline(time.Time) error { return nil }

func (r *recordingConn) snapshot() ([]byte, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.data.Bytes()), r.writes
}

func TestCoalesceKeepsOrderAndBytes(t *testing.T) {
	rc := newRecordingConn()
	c := New(rc, nil, 0)
	var want bytes.Buffer
	for i := range 5000 {
		p := bytes.Repeat([]byte{byte(i)}, 1+i%97)
		want.Write(p)
		n, err := c.Write(p)
		require.NoError(t, err)
		require.Equal(t, len(p), n)
	}
	require.NoError(t, c.Close())
	got, writes := rc.snapshot()
	require.Equal(t, want.Bytes(), got, "bytes reach the socket in Write order, none lost")
	require.LessOrEqual(t, writes, 5000)
}

// While the socket is busy, every frame written meanwhile joins one write.
func TestCoalesceBatchesWhileTheSocketIsBusy(t *testing.T) {
	rc := newRecordingConn()
	gate := make(chan struct{})
	rc.gate = gate
	c := New(rc, nil, 0)
	defer c.Close()

	_, err := c.Write([]byte("first"))
	require.NoError(t, err)
	<-rc.entered // the flusher is in the socket's write with "first"
	for range 100 {
		_, err := c.Write([]byte("frame"))
		require.NoError(t, err)
	}
	close(gate)
	require.Eventually(t, func() bool {
		got, _ := rc.snapshot()
		return len(got) == len("first")+100*len("frame")
	}, 5*time.Second, time.Millisecond)
	_, writes := rc.snapshot()
	require.Equal(t, 2, writes, "the 100 frames written while the socket was busy go out in one write")
}

// A slow socket pushes back: past maxPending bytes a Write waits, and gives
// up at its write deadline.
func TestCoalesceBackpressureHonoursTheWriteDeadline(t *testing.T) {
	rc := newRecordingConn()
	rc.gate = make(chan struct{}) // never opened: the socket is stuck
	c := New(rc, nil, 0)
	defer c.Close()

	_, err := c.Write([]byte("x"))
	require.NoError(t, err)
	<-rc.entered
	big := make([]byte, maxPending)
	_, err = c.Write(big) // fills the pending buffer
	require.NoError(t, err)
	require.NoError(t, c.SetWriteDeadline(time.Now().Add(50*time.Millisecond)))
	_, err = c.Write([]byte("more"))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
}

func TestCoalesceWriteErrorIsSticky(t *testing.T) {
	rc := newRecordingConn()
	boom := errors.New("connection reset")
	rc.err = boom
	c := New(rc, nil, 0)
	defer c.Close()

	_, err := c.Write([]byte("lost"))
	require.NoError(t, err, "the write is queued; the socket fails later")
	require.Eventually(t, func() bool {
		_, err := c.Write([]byte("next"))
		return errors.Is(err, boom)
	}, 5*time.Second, time.Millisecond)
}

// Close writes what is pending (the client's close frame) first, and
// does not hang on a stuck socket.
func TestCoalesceCloseFlushesAndIsBounded(t *testing.T) {
	rc := newRecordingConn()
	c := New(rc, nil, 0)
	_, err := c.Write([]byte("close-frame"))
	require.NoError(t, err)
	require.NoError(t, c.Close())
	got, _ := rc.snapshot()
	require.Equal(t, "close-frame", string(got))
	_, err = c.Write([]byte("after"))
	require.ErrorIs(t, err, net.ErrClosed)

	stuck := newRecordingConn()
	stuck.gate = make(chan struct{})
	c = New(stuck, nil, 0)
	c.closeFlush = 50 * time.Millisecond
	_, err = c.Write([]byte("never written"))
	require.NoError(t, err)
	<-stuck.entered
	closed := make(chan struct{})
	go func() { _ = c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung on a stuck socket")
	}
}

// A real socket pair: what one side writes through the coalescer the other
// reads intact.
func TestCoalesceOverTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var want bytes.Buffer
	for i := range 2000 {
		want.Write(bytes.Repeat([]byte{byte(i)}, 1+i%200))
	}
	got := make(chan []byte, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer s.Close()
		b, _ := io.ReadAll(s)
		got <- b
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	c := New(raw, nil, 0)
	data := want.Bytes()
	for i := 0; i < 2000; i++ {
		n := 1 + i%200
		_, err := c.Write(data[:n])
		require.NoError(t, err)
		data = data[n:]
	}
	require.NoError(t, c.Close())
	select {
	case b := <-got:
		require.Equal(t, want.Bytes(), b)
	case <-time.After(10 * time.Second):
		t.Fatal("the reader did not get EOF")
	}
}
