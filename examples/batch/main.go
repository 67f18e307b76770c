// Batch: a batch handler gets what the link has delivered, up to the batch
// size, or what arrived within the batch wait of the first message; its
// result settles every message of the batch. Here readings are written to a
// (pretend) store a batch at a time, and one batch fails once to show that
// the whole batch comes back.
//
//	go run ./examples/batch
//	go run ./examples/batch -url amqp://guest:guest@127.0.0.1:5673/
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

type Reading struct {
	Run    string  `json:"run"`
	Sensor int     `json:"sensor"`
	Value  float64 `json:"value"`
}

const (
	readings  = 250
	batchSize = 40
)

func main() { cli.Main("batch", run) }

func run(broker *cli.Broker) error {
	app, err := broker.App("batch-example")
	if err != nil {
		return err
	}
	addr := amqpactor.Queue("examples.readings")

	var (
		mu       sync.Mutex
		stored   = map[int]bool{} // sensor -> stored
		batches  int
		largest  int
		failedAt = -1
		done     = make(chan struct{})
	)
	_, err = app.SubscribeBatch(addr, func(ctx context.Context, ms []*amqpactor.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if failedAt < 0 && len(stored) > 0 {
			// The store hiccups once: the whole batch is modified and
			// comes back with delivery-count + 1.
			failedAt = len(stored)
			return errors.New("store unavailable")
		}
		batches++
		largest = max(largest, len(ms))
		for _, m := range ms {
			var r Reading
			if err := json.Unmarshal(m.Body, &r); err != nil || r.Run != cli.RunID() {
				continue // not ours: an earlier run's leftovers on a live queue
			}
			stored[r.Sensor] = true
		}
		if len(stored) == readings {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return nil
	}, amqpactor.WithBatch(batchSize, 50*time.Millisecond), amqpactor.WithCredit(100))
	if err != nil {
		return err
	}

	ctx, stop, err := cli.Start(app, 20*time.Second)
	if err != nil {
		return err
	}
	defer stop()

	for i := range readings {
		body, _ := json.Marshal(Reading{Run: cli.RunID(), Sensor: i, Value: float64(i) / 10})
		if err := app.Publish(ctx, addr, &amqpactor.Message{Body: body, ContentType: "application/json"}); err != nil {
			return err
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		return fmt.Errorf("only %d of %d readings stored", len(stored), readings)
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Printf("batch: %d readings stored in %d batches of at most %d (the largest had %d)\n", len(stored), batches, batchSize, largest)
	fmt.Printf("batch: one batch failed after %d readings and was redelivered whole\n", failedAt)
	return nil
}
