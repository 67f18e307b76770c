package debug

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/amqpactor/amqpactor"
)

// Snapshot is the data of one "tree" event of /events?tree=1.
type Snapshot struct {
	// At is when the snapshot was taken.
	At time.Time `json:"at"`
	// Control tells whether the handler has WithControl.
	Control bool `json:"control"`
	// Error is why there is no tree (the App is not running), if so.
	Error string        `json:"error,omitempty"`
	Tree  *SnapshotNode `json:"tree,omitempty"`
}

// SnapshotNode is one node of App.Tree with its path (as a StateChange
// names it) and when its last error came.
type SnapshotNode struct {
	Path      string `json:"path"`
	Name      string `json:"name"`
	Kind      string `json:"kind,omitempty"`
	Address   string `json:"address,omitempty"`
	Broker    string `json:"broker,omitempty"` // the connection node's (Node.Broker)
	State     string `json:"state,omitempty"`
	Restarts  int    `json:"restarts"`
	LastError string `json:"lastError,omitempty"`
	// LastErrorAt is when the state change that carried LastError came;
	// for an error that came with none (or before the handler was made),
	// when the handler first saw it in the tree.
	LastErrorAt *time.Time        `json:"lastErrorAt,omitempty"`
	Counters    map[string]uint64 `json:"counters,omitempty"`
	Children    []*SnapshotNode   `json:"children,omitempty"`
}

// errorTimes remembers, per path, the last error a state change carried and
// when, since the tree itself keeps only the error's text.
type errorTimes struct {
	mu sync.Mutex
	m  map[string]errorAt
}

type errorAt struct {
	text string
	at   time.Time
}

// watchErrors follows app's state changes for as long as the handler lives;
// it holds one entry per node with an error, dropped when the node stops.
func watchErrors(app *amqpactor.App) *errorTimes {
	e := &errorTimes{m: map[string]errorAt{}}
	app.WatchStateChanges(func(sc amqpactor.StateChange) {
		e.mu.Lock()
		defer e.mu.Unlock()
		switch {
		case sc.To == "stopped":
			delete(e.m, sc.Path)
		case sc.Err != nil:
			e.m[sc.Path] = errorAt{text: sc.Err.Error(), at: sc.At}
		}
	})
	return e
}

// at is when the error text of the node at path came: the time of the state
// change that carried it (or an error it wraps or is wrapped by), else now,
// remembered for the next snapshot.
func (e *errorTimes) at(path, text string, now time.Time) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.m[path]; ok && (x.text == text || strings.Contains(text, x.text) || strings.Contains(x.text, text)) {
		return x.at
	}
	e.m[path] = errorAt{text: text, at: now}
	return now
}

func (e *errorTimes) snapshot(n *amqpactor.Node, parent string, now time.Time) *SnapshotNode {
	if n == nil {
		return nil
	}
	path := n.Name
	if parent != "" {
		path = parent + "/" + n.Name
	}
	s := &SnapshotNode{Path: path, Name: n.Name, Kind: n.Kind, Address: n.Address, Broker: n.Broker, State: n.State,
		Restarts: n.Restarts, LastError: n.LastError, Counters: n.Counters}
	if n.LastError != "" {
		at := e.at(path, n.LastError, now)
		s.LastErrorAt = &at
	}
	if len(n.Children) > 0 {
		s.Children = make([]*SnapshotNode, 0, len(n.Children))
		for _, c := range n.Children {
			s.Children = append(s.Children, e.snapshot(c, path, now))
		}
	}
	return s
}

// writeSnapshot writes one "tree" event; false when the client is gone.
func writeSnapshot(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, app *amqpactor.App, control bool, errs *errorTimes) bool {
	ctx, cancel := context.WithTimeout(r.Context(), TreeTimeout)
	defer cancel()
	tree, err := app.Tree(ctx)
	if r.Context().Err() != nil {
		return false
	}
	now := time.Now()
	s := Snapshot{At: now, Control: control}
	if err != nil {
		s.Error = err.Error()
	} else {
		s.Tree = errs.snapshot(tree, "", now)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return false
	}
	_ = rc.SetWriteDeadline(time.Now().Add(EventWriteTimeout))
	_, err = fmt.Fprintf(w, "event: tree\ndata: %s\n\n", b)
	return err == nil
}
