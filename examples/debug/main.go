// Debug: the debug handler (package debug) on an HTTP port: a live page of
// the actor tree to open in a browser (/), the tree as JSON (/tree) and as
// text (/tree.txt), and the App's AsyncAPI 3.0 document (/asyncapi.json).
// The handler has WithControl, so the page can pause and resume the
// subscriptions. A small service runs behind it, publishing and handling a
// message every few milliseconds; the example serves for -for (2 s by
// default), reads its own endpoints once to show them, and exits.
//
//	go run ./examples/debug                          # serves on a free port for 2 s
//	go run ./examples/debug -addr 127.0.0.1:6060 -for 1m   # then open http://127.0.0.1:6060/debug/amqpactor/
//	go run ./examples/debug -url amqp://guest:guest@127.0.0.1:5673/
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/debug"
	"github.com/amqpactor/amqpactor/examples/internal/cli"
)

type Ping struct {
	Run string `json:"run"`
	N   int    `json:"n"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to serve the debug handler on")
	serveFor := flag.Duration("for", 2*time.Second, "how long to serve before exiting")
	cli.Main("debug", func(broker *cli.Broker) error { return run(broker, *addr, *serveFor) })
}

func run(broker *cli.Broker, addr string, serveFor time.Duration) error {
	app, err := broker.App("debug-example")
	if err != nil {
		return err
	}
	pings := amqpactor.Queue("examples.pings")
	_, err = app.Subscribe(pings, amqpactor.Typed(func(ctx context.Context, p Ping, m *amqpactor.Message) error {
		return nil
	}), amqpactor.WithPartitions(2), amqpactor.WithCredit(32))
	if err != nil {
		return err
	}
	_, err = app.Subscribe(amqpactor.Topic("examples.events"), func(ctx context.Context, m *amqpactor.Message) error {
		return nil
	})
	if err != nil {
		return err
	}

	ctx, stop, err := cli.Start(app, serveFor+20*time.Second)
	if err != nil {
		return err
	}
	defer stop()

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	// A debug port is not public: here the page may pause and resume.
	mux.Handle("/debug/amqpactor/", http.StripPrefix("/debug/amqpactor", debug.Handler(app, debug.WithControl())))
	// An open page holds its event stream: ending the base context ends
	// the stream, so that Shutdown need not wait for the browser to go.
	streams, endStreams := context.WithCancel(context.Background())
	defer endStreams()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		BaseContext: func(net.Listener) context.Context { return streams }}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	base := "http://" + ln.Addr().String() + "/debug/amqpactor"
	fmt.Printf("debug: serving %s/ for %s: open it in a browser for the live tree; also tree, tree.txt, asyncapi.json\n", base, serveFor)

	// The service at work while the port is up.
	work, stopWork := context.WithCancel(ctx)
	defer stopWork()
	worked := make(chan error, 1)
	go func() {
		var err error
		for n := 1; work.Err() == nil; n++ {
			body, _ := json.Marshal(Ping{Run: cli.RunID(), N: n})
			if err = app.Publish(work, pings, &amqpactor.Message{Body: body, ContentType: "application/json"}); err != nil {
				break
			}
			if err = app.Publish(work, amqpactor.Topic("examples.events"), &amqpactor.Message{Body: []byte("tick")}, amqpactor.Settled()); err != nil {
				break
			}
			select {
			case <-work.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
		if work.Err() != nil {
			err = nil
		}
		worked <- err
	}()

	// Read our own endpoints once, as a person with curl would.
	page, err := get(ctx, base+"/")
	if err != nil {
		return err
	}
	title, _, _ := strings.Cut(page, "</title>")
	_, title, _ = strings.Cut(title, "<title>")
	fmt.Printf("debug: GET /: the live page %q (%d bytes, self-contained)\n", title, len(page))
	tree, err := get(ctx, base+"/tree.txt")
	if err != nil {
		return err
	}
	fmt.Print("debug: GET /tree.txt\n", tree)
	docText, err := get(ctx, base+"/asyncapi.json")
	if err != nil {
		return err
	}
	var doc struct {
		AsyncAPI   string                     `json:"asyncapi"`
		Channels   map[string]json.RawMessage `json:"channels"`
		Operations map[string]json.RawMessage `json:"operations"`
	}
	if err := json.Unmarshal([]byte(docText), &doc); err != nil {
		return fmt.Errorf("asyncapi.json: %w", err)
	}
	fmt.Printf("debug: GET /asyncapi.json: AsyncAPI %s, channels %v, operations %v\n",
		doc.AsyncAPI, keys(doc.Channels), keys(doc.Operations))

	select {
	case <-time.After(serveFor):
	case err := <-served:
		return fmt.Errorf("the debug server stopped: %w", err)
	}
	stopWork()
	werr := <-worked
	endStreams()
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if werr != nil {
		return werr
	}
	fmt.Println("debug: done")
	return nil
}

func get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return "", err
	}
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, res.Status, b)
	}
	return string(b), nil
}

func keys(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
