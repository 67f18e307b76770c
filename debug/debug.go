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
//	GET /livez         200 "ok" while App.Health is nil, else 503 and why
//	GET /readyz        200 "ok" while App.Ready is nil, else 503 and why
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
// the client goes. At most MaxEventStreams are open at once; a new one past
// that ends the oldest. Each client has a buffer of EventBuffer changes; a client
// that falls that far behind gets a last "dropped" event and is
// disconnected, so a slow client never holds up the App.
//
// With ?tree=1, /events also carries a "tree" event at once and then every
// TreeInterval: a Snapshot of the whole tree, each node with its path and the
// time of its last error. A tree that cannot be had (the App is not
// running) comes as a snapshot with Error set.
//
// Without WithControl the handler only reads: it changes nothing in the
// App. With it, every request must name a loopback host, or one given to
// WithAllowedHosts, in its Host header (against DNS rebinding). It shows addresses, counters and last errors, never credentials, but
// it is meant for a port that is not public.
package debug

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
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
	hosts   []string
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

// WithAllowedHosts names the hosts (a name, or a name:port) a request's
// Host header may give when the handler has WithControl, beside the
// loopback names and addresses (localhost, *.localhost, 127.0.0.0/8, ::1),
// which are always allowed. With control on, a request for any other Host
// is answered 403: a page of another site whose name was rebound to this
// address (DNS rebinding) sends its own name as Host, and its own origin, so
// the origin checks alone would pass it.
func WithAllowedHosts(hosts ...string) Option {
	return func(c *config) { c.hosts = append(c.hosts, hosts...) }
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
	var h http.Handler = mux
	if cfg.control {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !allowedHost(r.Host, cfg.hosts) {
				http.Error(w, fmt.Sprintf("amqpactor debug: Host %q is not allowed (debug.WithAllowedHosts)", r.Host), http.StatusForbidden)
				return
			}
			mux.ServeHTTP(w, r)
		})
	}
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
	var streams streamSlots
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer streams.release(streams.take(cancel))
		serveEvents(w, r.WithContext(ctx), app, r.URL.Query().Get("tree") != "", cfg.control, errs)
	})
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) { serveProbe(w, app.Health()) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { serveProbe(w, app.Ready()) })
	mux.HandleFunc("GET /asyncapi.json", func(w http.ResponseWriter, r *http.Request) {
		doc, err := app.AsyncAPI()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	})
	return h
}

// serveProbe answers a probe: 200 "ok", or 503 with why as text.
func serveProbe(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, err.Error()+"\n")
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

// streamSlots bounds the /events streams of one Handler. Each holds a
// watcher and, with ?tree, asks every actor for its node each second.
type streamSlots struct {
	mu   sync.Mutex
	next uint64
	open map[uint64]context.CancelFunc // by the order they came in
}

// take gives a new stream its slot. When every slot is held, the oldest
// stream is ended: a client that never reads would otherwise keep its slot
// for as long as the App is quiet, and a browser's page, cut off, comes back
// by itself within a second.
func (s *streamSlots) take(cancel context.CancelFunc) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		s.open = make(map[uint64]context.CancelFunc)
	}
	if len(s.open) >= MaxEventStreams {
		oldest := s.next
		for id := range s.open {
			oldest = min(oldest, id)
		}
		s.open[oldest]()
		delete(s.open, oldest)
	}
	id := s.next
	s.next++
	s.open[id] = cancel
	return id
}

func (s *streamSlots) release(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, id)
}

// allowedHost tells whether host, a request's Host header, names a loopback
// name or address or one of allowed.
func allowedHost(host string, allowed []string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.ToLower(strings.TrimSuffix(strings.Trim(name, "[]"), "."))
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true
	}
	if ip := net.ParseIP(name); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, a := range allowed {
		if strings.EqualFold(a, host) || strings.EqualFold(a, name) {
			return true
		}
	}
	return false
}

// MaxEventStreams is how many /events streams one Handler serves at once;
// past it a new stream ends the oldest.
const MaxEventStreams = 16

// EventKeepalive is how often a quiet /events stream is written a comment,
// so that a client that has gone, or stopped reading, meets the write
// deadline even when the App changes nothing.
const EventKeepalive = 15 * time.Second

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
	keepalive := time.NewTicker(EventKeepalive)
	defer keepalive.Stop()
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
		case <-keepalive.C:
			_ = rc.SetWriteDeadline(time.Now().Add(EventWriteTimeout))
			if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil {
				return
			}
			fl.Flush()
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
