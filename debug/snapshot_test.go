package debug_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/debug"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/inproc/inproctest"
)

// snapshots reads the "tree" events of a stream until ctx ends.
type snapshots struct {
	mu   sync.Mutex
	all  []debug.Snapshot
	done chan struct{}
}

func openSnapshots(t *testing.T, ctx context.Context, url string) *snapshots {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	s := &snapshots{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "tree":
				var snap debug.Snapshot
				if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &snap) == nil {
					s.mu.Lock()
					s.all = append(s.all, snap)
					s.mu.Unlock()
				}
			}
		}
	}()
	return s
}

func (s *snapshots) last() (debug.Snapshot, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.all) == 0 {
		return debug.Snapshot{}, 0
	}
	return s.all[len(s.all)-1], len(s.all)
}

func find(n *debug.SnapshotNode, path string) *debug.SnapshotNode {
	if n == nil {
		return nil
	}
	if n.Path == path {
		return n
	}
	for _, c := range n.Children {
		if f := find(c, path); f != nil {
			return f
		}
	}
	return nil
}

func TestEventsCarriesTreeSnapshots(t *testing.T) {
	var mu sync.Mutex
	var errAt time.Time
	app := amqpactor.New(inproc.New(), amqpactor.WithName("snap"),
		amqpactor.WithBackoff(5*time.Millisecond, 50*time.Millisecond),
		amqpactor.WithStateChanges(func(sc amqpactor.StateChange) {
			if sc.Path == "connection/subscription:orders/receiver" && sc.Err != nil {
				mu.Lock()
				errAt = sc.At
				mu.Unlock()
			}
		}))
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(ctx context.Context, m *amqpactor.Message) error { return nil },
		amqpactor.WithSubscriptionName("orders"))
	require.NoError(t, err)
	srv := httptest.NewServer(debug.Handler(app))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Before Start: a snapshot at once, saying why there is no tree.
	s := openSnapshots(t, ctx, srv.URL+"/events?tree=1")
	require.Eventually(t, func() bool { _, n := s.last(); return n >= 1 }, 5*time.Second, 5*time.Millisecond)
	first, _ := s.last()
	require.Nil(t, first.Tree)
	require.Contains(t, first.Error, "not started")
	require.False(t, first.Control)

	b := inproctest.Start(t, app)
	receiver := "connection/subscription:orders/receiver"
	var snap debug.Snapshot
	require.Eventually(t, func() bool {
		snap, _ = s.last()
		r := find(snap.Tree, receiver)
		return r != nil && r.State == "attached"
	}, 5*time.Second, 5*time.Millisecond, "a snapshot with the tree")
	require.Equal(t, "connection", snap.Tree.Path)
	require.Equal(t, "receiver", find(snap.Tree, receiver).Kind)
	require.Nil(t, find(snap.Tree, receiver).LastErrorAt)

	// A fault: the next snapshots carry the error with the time of the
	// state change that brought it.
	require.Equal(t, 1, b.DetachLinks(amqpactor.Queue("orders"), "amqp:link:detach-forced", "snapshot test"))
	var r *debug.SnapshotNode
	require.Eventually(t, func() bool {
		snap, _ = s.last()
		r = find(snap.Tree, receiver)
		return r != nil && strings.Contains(r.LastError, "snapshot test")
	}, 5*time.Second, 5*time.Millisecond, "a snapshot with the error")
	require.NotNil(t, r.LastErrorAt)
	mu.Lock()
	require.True(t, errAt.Equal(*r.LastErrorAt), "error at %v, snapshot says %v", errAt, *r.LastErrorAt)
	mu.Unlock()

	cancel()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end when the client went")
	}
}
