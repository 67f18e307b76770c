// Orders: partitioned handling by group-id. Orders of one customer carry the
// customer as their group-id, so they are handled one at a time and in the
// order they were published, while different customers' orders are handled
// in parallel on the subscription's partition workers.
//
//	go run ./examples/orders                      # the in-process broker
//	go run ./examples/orders -url amqp://guest:guest@127.0.0.1:5673/
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/examples/internal/cli"
)

// Order is the payload; Seq numbers a customer's orders from 1.
type Order struct {
	Run      string `json:"run"`
	Customer string `json:"customer"`
	Seq      int    `json:"seq"`
}

const (
	customers   = 6
	perCustomer = 20
	partitions  = 4
)

func main() { cli.Main("orders", run) }

func run(broker *cli.Broker) error {
	app, err := broker.App("orders-example")
	if err != nil {
		return err
	}
	addr := amqpactor.Queue("examples.orders")

	var (
		mu       sync.Mutex
		next     = map[string]int{} // the Seq each customer's next order must have
		running  atomic.Int32       // handlers running right now
		parallel atomic.Int32       // the most that ever ran at once
		handled  atomic.Int32
		done     = make(chan struct{})
		failure  = make(chan error, 1)
	)
	_, err = app.Subscribe(addr, amqpactor.Typed(func(ctx context.Context, o Order, m *amqpactor.Message) error {
		if o.Run != cli.RunID() {
			return nil // left on a live queue by an earlier run
		}
		n := running.Add(1)
		defer running.Add(-1)
		for p := parallel.Load(); n > p && !parallel.CompareAndSwap(p, n); p = parallel.Load() {
		}
		time.Sleep(2 * time.Millisecond) // some work, so that partitions overlap

		mu.Lock()
		want := next[o.Customer] + 1
		next[o.Customer] = o.Seq
		mu.Unlock()
		if o.Seq != want {
			select {
			case failure <- fmt.Errorf("%s: order %d handled when %d was due", o.Customer, o.Seq, want):
			default:
			}
		}
		if handled.Add(1) == customers*perCustomer {
			close(done)
		}
		return nil
	}), amqpactor.WithPartitions(partitions), amqpactor.WithCredit(64))
	if err != nil {
		return err
	}

	ctx, stop, err := cli.Start(app, 20*time.Second)
	if err != nil {
		return err
	}
	defer stop()

	// Interleave the customers: c0#1, c1#1, ..., c0#2, ...
	for seq := 1; seq <= perCustomer; seq++ {
		for i := range customers {
			o := Order{Run: cli.RunID(), Customer: fmt.Sprintf("customer-%d", i), Seq: seq}
			body, _ := json.Marshal(o)
			m := &amqpactor.Message{Body: body, ContentType: "application/json", GroupID: o.Customer}
			if err := app.Publish(ctx, addr, m); err != nil {
				return err
			}
		}
	}
	select {
	case <-done:
	case err := <-failure:
		return err
	case <-ctx.Done():
		return fmt.Errorf("only %d of %d orders handled", handled.Load(), customers*perCustomer)
	}
	select {
	case err := <-failure:
		return err
	default:
	}
	fmt.Printf("orders: %d orders of %d customers handled, each customer's in publish order\n", handled.Load(), customers)
	fmt.Printf("orders: up to %d handlers ran at once on %d partitions\n", parallel.Load(), partitions)
	return nil
}
