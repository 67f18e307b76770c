// Package debug serves an App's insides over HTTP for a debug port: the live
// actor tree (App.Tree) as JSON and as indented text, and the App's AsyncAPI
// document (App.AsyncAPI).
//
//	mux.Handle("/debug/amqpactor/", http.StripPrefix("/debug/amqpactor", debug.Handler(app)))
//
// Routes, relative to where the handler is mounted:
//
//	GET /              an index of the routes
//	GET /tree          the tree as JSON (?format=text for text)
//	GET /tree.txt      the tree as indented text
//	GET /asyncapi.json the AsyncAPI 3.0 document
//
// The handler only reads: it changes nothing in the App. It shows addresses,
// counters and last errors, never credentials, but it is meant for a port
// that is not public.
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
	"time"

	"github.com/amqpactor/amqpactor"
)

// TreeTimeout bounds how long a request waits for the tree.
const TreeTimeout = 2 * time.Second

// Handler returns the debug handler of app.
//
// A nil app gives a handler that answers every request with 503.
func Handler(app *amqpactor.App) http.Handler {
	if app == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "amqpactor debug: no App (debug.Handler(nil))", http.StatusServiceUnavailable)
		})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "amqpactor debug\n\n"+
			"tree           the live actor tree as JSON (tree?format=text for text)\n"+
			"tree.txt       the live actor tree as indented text\n"+
			"asyncapi.json  the AsyncAPI 3.0 document of the App\n")
	})
	mux.HandleFunc("GET /tree", func(w http.ResponseWriter, r *http.Request) {
		serveTree(w, r, app, r.URL.Query().Get("format") == "text")
	})
	mux.HandleFunc("GET /tree.txt", func(w http.ResponseWriter, r *http.Request) {
		serveTree(w, r, app, true)
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
