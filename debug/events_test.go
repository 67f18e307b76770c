package debug_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/debug"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/inproc/inproctest"
)

// stream reads the server-sent events of url until ctx ends, keeping the
// "state" events and noting a "dropped" one.
type stream struct {
	mu      sync.Mutex
	events  []debug.Event
	dropped bool
	done    chan struct{}
	ctype   string
}

func openStream(t *testing.T, ctx context.Context, url string) *stream {
	t.Helper()
	s := &stream{}
	s.done, s.ctype = openSSE(t, ctx, url, func(event, data string) {
		switch event {
		case "state":
			var e debug.Event
			if json.Unmarshal([]byte(data), &e) == nil {
				s.mu.Lock()
				s.events = append(s.events, e)
				s.mu.Unlock()
			}
		case "dropped":
			s.mu.Lock()
			s.dropped = true
			s.mu.Unlock()
		}
	})
	return s
}

func (s *stream) of(path string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.events {
		if e.Path == path {
			out = append(out, e.From+"→"+e.To)
		}
	}
	return out
}

func TestEventsStreamsStateChanges(t *testing.T) {
	var mu sync.Mutex
	byPath := map[string][]string{}
	app, srv := servedApp(t, "sse", "orders-sub", func(sc amqpactor.StateChange) {
		mu.Lock()
		byPath[sc.Path] = append(byPath[sc.Path], sc.From+"→"+sc.To)
		mu.Unlock()
	})
	defer srv.Close()

	// Connected before Start: the stream has every change from the first.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := openStream(t, ctx, srv.URL+"/events")
	require.Equal(t, "text/event-stream", s.ctype)

	b := inproctest.Start(t, app)
	pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer pcancel()
	require.NoError(t, app.Publish(pctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("x")}))
	require.Equal(t, 1, b.DropConnections(nil))
	require.NoError(t, app.Publish(pctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("y")}))

	nodes := []string{"connection", "connection/publisher", "connection/subscription:orders-sub",
		"connection/subscription:orders-sub/receiver", "connection/publisher/sender:orders"}
	// The stream carries what WithStateChanges saw, in the same order.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range nodes {
			want := byPath[p]
			got := s.of(p)
			if len(want) == 0 || len(got) < len(want) || strings.Join(got[:len(want)], " ") != strings.Join(want, " ") {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond)
	// The connection went down and came back, on the stream. A publish can
	// succeed before the stream has carried the final attached, so wait.
	var conn string
	require.Eventually(t, func() bool {
		conn = strings.Join(s.of("connection"), " ")
		return strings.Contains(conn, "attached→restarting") && strings.HasSuffix(conn, "→attached")
	}, 10*time.Second, 5*time.Millisecond, "the connection's changes on the stream")
	require.Contains(t, conn, "attached→restarting", conn)
	require.True(t, strings.HasSuffix(conn, "→attached"), conn)

	// The client goes: the handler returns (srv.Close would wait for it).
	cancel()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end when the client went")
	}
	require.False(t, s.dropped)
}

// stuckWriter is a client that stops reading after the stream's first
// write: every later Write blocks until release is closed.
type stuckWriter struct {
	h       http.Header
	mu      sync.Mutex
	buf     strings.Builder
	writes  int
	release chan struct{}
}

func (w *stuckWriter) Header() http.Header { return w.h }
func (w *stuckWriter) WriteHeader(int)     {}
func (w *stuckWriter) Flush()              {}
func (w *stuckWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.writes++
	n := w.writes
	w.mu.Unlock()
	if n > 1 {
		<-w.release
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

func TestEventsDropsASlowClient(t *testing.T) {
	var delivered atomic.Int64
	app := amqpactor.New(inproc.New(), amqpactor.WithName("slow"),
		amqpactor.WithStateChanges(func(amqpactor.StateChange) { delivered.Add(1) }))
	// Enough nodes that starting them makes more changes than a client's
	// buffer holds.
	for i := range debug.EventBuffer/4 + 1 {
		_, err := app.Subscribe(amqpactor.Queue(fmt.Sprintf("q%d", i)), func(ctx context.Context, m *amqpactor.Message) error { return nil })
		require.NoError(t, err)
	}
	w := &stuckWriter{h: http.Header{}, release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/events", nil)
	served := make(chan struct{})
	go func() {
		defer close(served)
		debug.Handler(app).ServeHTTP(w, req)
	}()
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.writes >= 1
	}, 5*time.Second, time.Millisecond, "the stream began")

	inproctest.Start(t, app)
	// The App delivered everything while the client was stuck, and dropped
	// nothing of its own.
	require.Eventually(t, func() bool { return delivered.Load() > debug.EventBuffer+8 }, 10*time.Second, time.Millisecond)
	require.Zero(t, app.DroppedStateChanges())
	// Once its write returns, the client gets a last "dropped" and goes.
	close(w.release)
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("the slow client was not dropped")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	require.Contains(t, w.buf.String(), "event: dropped")
}

// /events serves at most MaxEventStreams streams at once: the next ends the
// oldest, so that clients holding streams they never read cannot keep a new
// one out (issue 29). Raw connections that send a request and never read a
// byte hold every slot; the next client is served and sees its first event.
func TestEventsStreamsAreBounded(t *testing.T) {
	app := amqpactor.New(inproc.New(), amqpactor.WithName("bounded-streams"))
	inproctest.Start(t, app)
	srv := httptest.NewServer(debug.Handler(app))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var silent []net.Conn
	var got [][]byte // what each silent connection read
	for i := range debug.MaxEventStreams {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		require.NoError(t, err)
		_, err = io.WriteString(c, "GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n")
		require.NoError(t, err)
		silent = append(silent, c)
		// Its first event says the stream holds its slot: the streams are
		// then oldest first in dial order, which handlers started
		// concurrently do not promise.
		got = append(got, readUntil(t, c, nil, "amqpactor state changes"))
		require.Contains(t, string(got[i]), "200 OK")
	}
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	open := func() *http.Response {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return res
	}
	for range 3 * debug.MaxEventStreams {
		res := open()
		require.Equal(t, http.StatusOK, res.StatusCode)
		line, err := bufio.NewReader(res.Body).ReadString('\n')
		require.NoError(t, err)
		require.Contains(t, line, "amqpactor state changes")
		res.Body.Close()
	}
	// The oldest silent stream was ended: it reads up to the last chunk.
	readUntil(t, silent[0], got[0], "\r\n0\r\n\r\n")
}

// readUntil reads c, after what it read before (got), until what it read
// contains want, within a bound; it returns all it read.
func readUntil(t *testing.T, c net.Conn, got []byte, want string) []byte {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	buf := make([]byte, 4096)
	for !strings.Contains(string(got), want) {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		require.NoError(t, err, "reading for %q: %q", want, got)
	}
	return got
}
