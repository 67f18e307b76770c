package debug_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/debug"
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
	s := &snapshots{}
	s.done, _ = openSSE(t, ctx, url, func(event, data string) {
		var snap debug.Snapshot
		if event == "tree" && json.Unmarshal([]byte(data), &snap) == nil {
			s.mu.Lock()
			s.all = append(s.all, snap)
			s.mu.Unlock()
		}
	})
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
	app, srv := servedApp(t, "snap", "orders", func(sc amqpactor.StateChange) {
		if sc.Path == "connection/subscription:orders/receiver" && sc.Err != nil {
			mu.Lock()
			errAt = sc.At
			mu.Unlock()
		}
	})
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
