// Package debug serves an App's insides over HTTP for a debug port: a live
// page of the actor tree, the tree (App.Tree) as JSON and as indented text,
// and the App's AsyncAPI document (App.AsyncAPI).
//
//	mux.Handle("/debug/amqpactor/", http.StripPrefix("/debug/amqpactor", debug.Handler(app)))
//
// Routes, relative to where the handler is mounted (mount it under a path
// that ends in "/": the page asks for its data by relative URLs):
//
//	GET /              the live page (HTML, self-contained)
//	GET /tree          the tree as JSON (?format=text for text)
//	GET /tree.txt      the tree as indented text
//	GET /asyncapi.json the AsyncAPI 3.0 document
//	GET /events        the App's state changes as server-sent events
//	                   (?tree=1: with snapshots of the tree)
//	POST /subscriptions/{name}/pause, /subscriptions/{name}/resume
//	                   only with WithControl (else 403)
//
// The page shows the tree as collapsible nodes coloured by state, with each
// node's address, counters, last error and when it came, and a sparkline of
// its messages per second over the last minute. It follows /events?tree=1,
// so it changes as the App does, and the browser reconnects it by itself.
//
// /events streams every state change of the App's tree (see
// amqpactor.StateChange) from the moment the client connects, as
// text/event-stream: one "state" event per change, its data one JSON object
// ({"path", "kind", "address", "from", "to", "error", "at"}). It ends when
// the client goes. Each client has a buffer of EventBuffer changes; a client
// that falls that far behind gets a last "dropped" event and is
// disconnected, so a slow client never holds up the App.
//
// With ?tree=1, /events also carries a "tree" event at once and then every
// TreeInterval: a Snapshot of the whole tree, each node with its path and the
// time of its last error. A tree that cannot be had (the App is not
// running) comes as a snapshot with Error set.
//
// Without WithControl the handler only reads: it changes nothing in the
// App. It shows addresses, counters and last errors, never credentials, but
// it is meant for a port that is not public.
package debug

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/amqpactor/amqpactor"
)

// TreeTimeout bounds how long a request waits for the tree.
const TreeTimeout = 2 * time.Second

// TreeInterval is how often /events?tree=1 sends a snapshot of the tree.
const TreeInterval = time.Second

// Option configures Handler. The zero configuration only reads.
type Option func(*config)

type config struct {
	control bool
}

// WithControl turns on the handler's actions: POST
// /subscriptions/{name}/pause and /subscriptions/{name}/resume pause and
// resume a subscription (Subscription.Pause, Resume; the name is the one
// after "subscription:" in the tree), and the page shows their buttons. Off
// by default: the endpoints answer 403 and the page has no buttons.
//
// Each request must carry the header ControlHeader (the page sets it) and,
// if it has an Origin or Sec-Fetch-Site header, come from the handler's own
// origin: a form or a script of another site cannot act on the App.
func WithControl() Option {
	return func(c *config) { c.control = true }
}

// ControlHeader must be on every control request; its value is not
// checked. A browser sends a custom header across origins only after a
// preflight that the handler never answers.
const ControlHeader = "X-Amqpactor-Debug"

// Handler returns the debug handler of app. It follows app's state changes
// (App.WatchStateChanges) from the moment it is made, for as long as app
// lives, to tell when each node's last error came.
//
// A nil app gives a handler that answers every request with 503.
func Handler(app *amqpactor.App, opts ...Option) http.Handler {
	if app == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "amqpactor debug: no App (debug.Handler(nil))", http.StatusServiceUnavailable)
		})
	}
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	errs := watchErrors(app)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", servePage)
	mux.HandleFunc("POST /subscriptions/{name}/{action}", func(w http.ResponseWriter, r *http.Request) {
		serveControl(w, r, app, cfg.control)
	})
	mux.HandleFunc("GET /tree", func(w http.ResponseWriter, r *http.Request) {
		serveTree(w, r, app, r.URL.Query().Get("format") == "text")
	})
	mux.HandleFunc("GET /tree.txt", func(w http.ResponseWriter, r *http.Request) {
		serveTree(w, r, app, true)
	})
	var streams atomic.Int32
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		// Each stream holds a watcher and, with ?tree, asks every actor
		// for its node each second: their number is bounded.
		if streams.Add(1) > MaxEventStreams {
			streams.Add(-1)
			http.Error(w, "amqpactor debug: too many /events streams open", http.StatusServiceUnavailable)
			return
		}
		defer streams.Add(-1)
		serveEvents(w, r, app, r.URL.Query().Get("tree") != "", cfg.control, errs)
	})
	mux.HandleFunc("GET /asyncapi.json", func(w http.ResponseWriter, r *http.Request) {
		doc, err := app.AsyncAPI()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	})
	return mux
}

// MaxEventStreams is how many /events streams one Handler serves at once;
// past it a request is answered 503.
const MaxEventStreams = 16

// EventBuffer is how many state changes may wait to be written to one
// /events client before it is dropped.
const EventBuffer = 256

// EventWriteTimeout bounds each write to an /events client (where the
// server supports write deadlines): a client that stops reading is cut off.
const EventWriteTimeout = 10 * time.Second

// Event is the JSON of one state change on /events.
type Event struct {
	Path    string    `json:"path"`
	Kind    string    `json:"kind,omitempty"`
	Address string    `json:"address,omitempty"`
	From    string    `json:"from"`
	To      string    `json:"to"`
	Error   string    `json:"error,omitempty"`
	At      time.Time `json:"at"`
}

func serveEvents(w http.ResponseWriter, r *http.Request, app *amqpactor.App, tree, control bool, errs *errorTimes) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "amqpactor debug: this server cannot stream", http.StatusInternalServerError)
		return
	}
	// The App's delivery goroutine only ever tries to put a change in ch:
	// when the client's buffer is full, the client is dropped instead.
	ch := make(chan amqpactor.StateChange, EventBuffer)
	full := make(chan struct{})
	var once sync.Once
	stop := app.WatchStateChanges(func(sc amqpactor.StateChange) {
		select {
		case ch <- sc:
		default:
			once.Do(func() { close(full) })
		}
	})
	defer stop()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusOK)
	_ = rc.SetWriteDeadline(time.Now().Add(EventWriteTimeout))
	// retry: a browser whose stream broke asks again after a second, not
	// its default three.
	_, _ = io.WriteString(w, ": amqpactor state changes\nretry: 1000\n\n")
	fl.Flush()
	// Snapshots are taken on this goroutine, between writes: while one is
	// taken, state changes wait in ch, and the order on the wire is kept.
	var tick <-chan time.Time
	if tree {
		if !writeSnapshot(w, r, rc, app, control, errs) {
			return
		}
		fl.Flush()
		t := time.NewTicker(TreeInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-tick:
			if !writeSnapshot(w, r, rc, app, control, errs) {
				return
			}
			fl.Flush()
		case sc := <-ch:
			e := Event{Path: sc.Path, Kind: sc.Kind, Address: sc.Address, From: sc.From, To: sc.To, At: sc.At}
			if sc.Err != nil {
				e.Error = sc.Err.Error()
			}
			b, err := json.Marshal(e)
			if err != nil {
				return
			}
			_ = rc.SetWriteDeadline(time.Now().Add(EventWriteTimeout))
			if _, err := fmt.Fprintf(w, "event: state\ndata: %s\n\n", b); err != nil {
				return
			}
			fl.Flush()
		case <-full:
			_, _ = fmt.Fprintf(w, "event: dropped\ndata: {\"reason\":\"the client fell %d state changes behind\"}\n\n", EventBuffer)
			fl.Flush()
			return
		case <-r.Context().Done():
			return
		}
	}
}

func serveTree(w http.ResponseWriter, r *http.Request, app *amqpactor.App, text bool) {
	ctx, cancel := context.WithTimeout(r.Context(), TreeTimeout)
	defer cancel()
	tree, err := app.Tree(ctx)
	if err != nil {
		// Not running (not started yet, or stopped): the tree is not there.
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if text {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_ = WriteTree(w, tree)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(tree)
}

// WriteTree writes n and its children as indented text, one node a line:
// name, kind, state, address, restarts, the last error and the non-zero
// counters in name order.
//
// A nil writer is an error; a nil node writes nothing.
func WriteTree(w io.Writer, n *amqpactor.Node) error {
	if w == nil {
		return errors.New("amqpactor/debug: WriteTree: nil writer")
	}
	var b strings.Builder
	writeNode(&b, n, 0)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeNode(b *strings.Builder, n *amqpactor.Node, depth int) {
	if n == nil {
		return
	}
	b.WriteString(strings.Repeat("  ", depth))
	b.WriteString(n.Name)
	if n.Kind != "" {
		fmt.Fprintf(b, " (%s)", n.Kind)
	}
	if n.State != "" {
		fmt.Fprintf(b, " [%s]", n.State)
	}
	if n.Address != "" {
		b.WriteString(" " + n.Address)
	}
	if n.Broker != "" {
		fmt.Fprintf(b, " broker=%q", n.Broker)
	}
	if n.Restarts > 0 {
		fmt.Fprintf(b, " restarts=%d", n.Restarts)
	}
	keys := make([]string, 0, len(n.Counters))
	for k, v := range n.Counters {
		if v > 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(b, " %s=%d", k, n.Counters[k])
	}
	if n.LastError != "" {
		fmt.Fprintf(b, " lastError=%q", n.LastError)
	}
	b.WriteByte('\n')
	for _, c := range n.Children {
		writeNode(b, c, depth+1)
	}
}
