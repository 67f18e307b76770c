// RPC: request/reply. A price service answers on its queue with Responder;
// callers send requests with Request and wait for the reply that matches
// their correlation-id, bounded by their context. A request the service
// refuses is answered with an error reply, so its caller fails at once with
// a *RemoteError rather than at its deadline.
//
//	go run ./examples/rpc
//	go run ./examples/rpc -url amqp://guest:guest@127.0.0.1:5673/
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/examples/internal/cli"
)

type Quote struct {
	SKU   string  `json:"sku"`
	Price float64 `json:"price"`
}

var prices = map[string]float64{"widget": 4.20, "gadget": 17.50, "gizmo": 99.00}

func main() { cli.Main("rpc", run) }

func run(broker *cli.Broker) error {
	app, err := broker.App("rpc-example")
	if err != nil {
		return err
	}
	addr := amqpactor.Queue("examples.prices")

	// The service. Its reply goes to the request's reply-to with the
	// request's correlation-id; an error (or Reject) goes back to the caller
	// as an error reply, its text included, and the request is accepted.
	_, err = app.Subscribe(addr, amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		sku := string(req.Body)
		p, ok := prices[sku]
		if !ok {
			return nil, amqpactor.Reject(fmt.Errorf("no price for %q", sku))
		}
		body, _ := json.Marshal(Quote{SKU: sku, Price: p})
		return &amqpactor.Message{Body: body, ContentType: "application/json"}, nil
	}))
	if err != nil {
		return err
	}

	ctx, stop, err := cli.Start(app, 20*time.Second)
	if err != nil {
		return err
	}
	defer stop()

	// Callers, in parallel.
	skus := []string{"widget", "gadget", "gizmo"}
	quotes := make([]Quote, len(skus))
	errs := make([]error, len(skus))
	var wg sync.WaitGroup
	for i, sku := range skus {
		wg.Go(func() {
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			defer rcancel()
			rep, err := app.Request(rctx, addr, &amqpactor.Message{Body: []byte(sku)})
			if err == nil {
				err = json.Unmarshal(rep.Body, &quotes[i])
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, q := range quotes {
		fmt.Printf("rpc: %-6s costs %6.2f\n", q.SKU, q.Price)
	}

	// A request the service rejects: the error reply ends it at once, long
	// before its deadline.
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	_, err = app.Request(rctx, addr, &amqpactor.Message{Body: []byte("unobtainium")})
	var re *amqpactor.RemoteError
	if !errors.As(err, &re) {
		return fmt.Errorf("a rejected request should fail with a *RemoteError, got %v", err)
	}
	fmt.Printf("rpc: unobtainium has no price: %s (%s)\n", re.Description, re.Condition)
	return nil
}
