// Quickstart: a small order service on the in-process broker (or a live one
// with -url). It shows partitioned handling by group-id, a retry, request/
// reply, a transaction, and prints the actor tree; it exits by itself.
//
// -debug ADDR serves the debug handler (package debug: a live page of the
// actor tree to open in a browser, the tree as JSON and text, the AsyncAPI
// document) on ADDR while it runs; -asyncapi FILE writes the
// App's AsyncAPI document to FILE before it stops.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/debug"
	"github.com/amqpactor/amqpactor/examples/internal/cli"
)

type Order struct {
	ID       int    `json:"id"`
	Customer string `json:"customer"`
}

func main() {
	flag.StringVar(&debugAddr, "debug", "", "serve the debug handler (a live page of the tree, the tree, AsyncAPI) on this address while running, e.g. 127.0.0.1:6060")
	flag.StringVar(&asyncAPIFile, "asyncapi", "", "write the App's AsyncAPI document to this file before stopping")
	cli.Main("quickstart", run)
}

var debugAddr, asyncAPIFile string

// serveDebug serves the debug handler on addr until the returned stop is
// called.
func serveDebug(app *amqpactor.App, addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("debug: %w", err)
	}
	// The page holds its event stream open: ending the base context ends
	// the stream, so that Shutdown need not wait for the browser to go.
	base, endStreams := context.WithCancel(context.Background())
	srv := &http.Server{Handler: debug.Handler(app), ReadHeaderTimeout: 5 * time.Second,
		BaseContext: func(net.Listener) context.Context { return base }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	fmt.Fprintf(os.Stderr, "debug: open http://%s/ in a browser for the live tree (also tree, tree.txt, asyncapi.json) while the quickstart runs\n", ln.Addr())
	return func() {
		endStreams()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

func run(broker *cli.Broker) error {
	c, err := broker.Connector("quickstart")
	if err != nil {
		return err
	}
	app := amqpactor.New(c, amqpactor.WithLogger(cli.Logger()))
	const customers, perCustomer = 4, 25

	// Orders are partitioned by customer (the group-id): one customer's
	// orders are handled in order, different customers in parallel.
	var mu sync.Mutex
	last := map[string]int{}
	var handled atomic.Int64
	allDone := make(chan struct{})
	_, err = app.Subscribe(amqpactor.Queue("quickstart.orders"),
		amqpactor.Typed(func(ctx context.Context, o Order, m *amqpactor.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if o.ID <= last[o.Customer] {
				return amqpactor.Reject(fmt.Errorf("order %d of %s out of order", o.ID, o.Customer))
			}
			last[o.Customer] = o.ID
			if handled.Add(1) == customers*perCustomer {
				close(allDone)
			}
			return nil
		}),
		amqpactor.WithPartitions(4), amqpactor.WithCredit(64))
	if err != nil {
		return err
	}

	// A flaky handler: fails twice, succeeds on the third delivery.
	retried := make(chan uint32, 1)
	_, err = app.Subscribe(amqpactor.Queue("quickstart.flaky"), func(ctx context.Context, m *amqpactor.Message) error {
		if m.DeliveryCount < 2 {
			return errors.New("temporary failure")
		}
		retried <- m.DeliveryCount
		return nil
	}, amqpactor.WithRetry(amqpactor.RetryPolicy{MaxDeliveries: 5}))
	if err != nil {
		return err
	}

	// Request/reply: a price service.
	_, err = app.Subscribe(amqpactor.Queue("quickstart.prices"),
		amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
			return &amqpactor.Message{Body: []byte("42.00 EUR for " + string(req.Body))}, nil
		}))
	if err != nil {
		return err
	}

	audit := make(chan string, 2)
	_, err = app.Subscribe(amqpactor.Queue("quickstart.audit"), func(ctx context.Context, m *amqpactor.Message) error {
		audit <- string(m.Body)
		return nil
	})
	if err != nil {
		return err
	}

	ctx, stop, err := cli.Start(app, 20*time.Second)
	if err != nil {
		return err
	}
	defer stop()
	if debugAddr != "" {
		stopDebug, err := serveDebug(app, debugAddr)
		if err != nil {
			return err
		}
		defer stopDebug()
	}

	for i := 1; i <= perCustomer; i++ {
		for c := 0; c < customers; c++ {
			body, _ := json.Marshal(Order{ID: i, Customer: fmt.Sprintf("customer-%d", c)})
			m := &amqpactor.Message{Body: body, ContentType: "application/json", GroupID: fmt.Sprintf("customer-%d", c)}
			if err := app.Publish(ctx, amqpactor.Queue("quickstart.orders"), m); err != nil {
				return err
			}
		}
	}
	select {
	case <-allDone:
		fmt.Printf("orders: %d handled, each customer's in order\n", handled.Load())
	case <-ctx.Done():
		return fmt.Errorf("orders: only %d of %d handled", handled.Load(), customers*perCustomer)
	}

	if err := app.Publish(ctx, amqpactor.Queue("quickstart.flaky"), &amqpactor.Message{Body: []byte("flaky")}); err != nil {
		return err
	}
	select {
	case n := <-retried:
		fmt.Printf("retry: succeeded on delivery %d after %d failures\n", n+1, n)
	case <-ctx.Done():
		return errors.New("retry: the flaky message never succeeded")
	}

	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	reply, err := app.Request(rctx, amqpactor.Queue("quickstart.prices"), &amqpactor.Message{Body: []byte("widget")})
	rcancel()
	if err != nil {
		return err
	}
	fmt.Printf("request/reply: %s\n", reply.Body)

	err = app.Transaction(ctx, func(tx *amqpactor.Tx) error {
		if err := tx.Publish(ctx, amqpactor.Queue("quickstart.audit"), &amqpactor.Message{Body: []byte("committed")}); err != nil {
			return err
		}
		return nil
	})
	switch {
	case errors.Is(err, amqpactor.ErrNotSupported):
		fmt.Printf("transaction: %v\n", err)
	case err != nil:
		return err
	default:
		_ = app.Transaction(ctx, func(tx *amqpactor.Tx) error {
			_ = tx.Publish(ctx, amqpactor.Queue("quickstart.audit"), &amqpactor.Message{Body: []byte("rolled back")})
			return errors.New("changed my mind")
		})
		select {
		case s := <-audit:
			fmt.Printf("transaction: audit saw %q (and not the rolled-back one)\n", s)
		case <-ctx.Done():
			return errors.New("transaction: the committed message never arrived")
		}
	}

	tree, err := app.Tree(ctx)
	if err != nil {
		return err
	}
	fmt.Println("actor tree:")
	printTree(tree, "  ")

	if asyncAPIFile != "" {
		doc, err := app.AsyncAPI()
		if err != nil {
			return err
		}
		if err := os.WriteFile(asyncAPIFile, doc, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func printTree(n *amqpactor.Node, indent string) {
	line := fmt.Sprintf("%s%s [%s]", indent, n.Name, n.State)
	if n.Address != "" && n.Kind != "connection" {
		line += " " + n.Address
	}
	var cs []string
	for _, k := range []string{"delivered", "accepted", "modified", "rejected", "published", "confirmed", "handled", "credit"} {
		if v, ok := n.Counters[k]; ok && v > 0 {
			cs = append(cs, fmt.Sprintf("%s=%d", k, v))
		}
	}
	if len(cs) > 0 {
		line += " " + strings.Join(cs, " ")
	}
	fmt.Println(line)
	for _, c := range n.Children {
		printTree(c, indent+"  ")
	}
}
