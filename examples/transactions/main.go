// Transactions: publishes inside App.Transaction become visible together
// when the function returns nil, and not at all when it returns an error.
// A transfer between two ledgers is published as a debit and a credit in
// one transaction; a second transfer fails half-way and is rolled back. A
// third arrives as a request on a queue: its handler publishes the two
// entries and accepts the request in one transaction (Tx.Accept), so the
// request is consumed if and only if its entries are published.
//
// The in-process broker has transactions, and so has RabbitMQ over AMQP
// 0-9-1 (-amqp091: Dial091, tx.select). Over AMQP 1.0 on a live broker,
// RabbitMQ 4 or Artemis, go-amqp has no coordinator link yet, so Transaction
// returns an error that errors.Is(err, amqpactor.ErrNotSupported); the
// example says so and exits 0.
//
//	go run ./examples/transactions
//	go run ./examples/transactions -url amqp://guest:guest@127.0.0.1:5673/
//	go run ./examples/transactions -url amqp://guest:guest@127.0.0.1:5673/ -amqp091
//	go run ./examples/transactions -url amqp://artemis:artemis@127.0.0.1:5682/ -dialect artemis
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/examples/internal/cli"
)

type Entry struct {
	Run      string `json:"run"`
	Transfer string `json:"transfer"`
	Account  string `json:"account"`
	Amount   int    `json:"amount"`
}

func main() { cli.Main("transactions", run) }

func run(broker *cli.Broker) error {
	app, err := broker.App("transactions-example")
	if err != nil {
		return err
	}
	ledger := amqpactor.Queue("examples.ledger")
	transfers := amqpactor.Queue("examples.transfers")

	entries := make(chan Entry, 16)
	_, err = app.Subscribe(ledger, amqpactor.Typed(func(ctx context.Context, e Entry, m *amqpactor.Message) error {
		if e.Run == cli.RunID() {
			entries <- e
		}
		return nil
	}), amqpactor.WithPartitions(1))
	if err != nil {
		return err
	}

	publish := func(ctx context.Context, tx *amqpactor.Tx, e Entry) error {
		e.Run = cli.RunID()
		body, _ := json.Marshal(e)
		return tx.Publish(ctx, ledger, &amqpactor.Message{Body: body, ContentType: "application/json"})
	}
	// A transfer request becomes its two entries, and is accepted, in one
	// transaction: both or neither.
	_, err = app.Subscribe(transfers, amqpactor.Typed(func(hctx context.Context, t Entry, m *amqpactor.Message) error {
		if t.Run != cli.RunID() {
			return nil // an earlier run's
		}
		return app.Transaction(hctx, func(tx *amqpactor.Tx) error {
			if err := publish(hctx, tx, Entry{Transfer: t.Transfer, Account: "bob", Amount: -t.Amount}); err != nil {
				return err
			}
			if err := publish(hctx, tx, Entry{Transfer: t.Transfer, Account: t.Account, Amount: +t.Amount}); err != nil {
				return err
			}
			return tx.Accept(m)
		})
	}), amqpactor.WithPartitions(1))
	if err != nil {
		return err
	}
	ctx, stop, err := cli.Start(app, 20*time.Second)
	if err != nil {
		return err
	}
	defer stop()

	// T1 commits: both entries arrive.
	err = app.Transaction(ctx, func(tx *amqpactor.Tx) error {
		if err := publish(ctx, tx, Entry{Transfer: "T1", Account: "alice", Amount: -30}); err != nil {
			return err
		}
		return publish(ctx, tx, Entry{Transfer: "T1", Account: "bob", Amount: +30})
	})
	if errors.Is(err, amqpactor.ErrNotSupported) {
		fmt.Printf("transactions: this broker connection has none: %v\n", err)
		return nil
	}
	if err != nil {
		return err
	}

	// T2 fails after its debit: rolled back, nothing of it arrives.
	err = app.Transaction(ctx, func(tx *amqpactor.Tx) error {
		if err := publish(ctx, tx, Entry{Transfer: "T2", Account: "alice", Amount: -500}); err != nil {
			return err
		}
		return errors.New("insufficient funds")
	})
	fmt.Printf("transactions: T2 rolled back: %v\n", err)

	// T3 is a request, handled in a transaction that consumes it and
	// publishes its entries; once they are here, T2's would have been too.
	body, _ := json.Marshal(Entry{Run: cli.RunID(), Transfer: "T3", Account: "carol", Amount: 5})
	if err := app.Publish(ctx, transfers, &amqpactor.Message{Body: body, ContentType: "application/json"}); err != nil {
		return err
	}

	balance := map[string]int{}
	seen := map[string]int{}
	for n := 0; n < 4; n++ {
		select {
		case e := <-entries:
			balance[e.Account] += e.Amount
			seen[e.Transfer]++
		case <-ctx.Done():
			return fmt.Errorf("only %d of 4 committed entries arrived", n)
		}
	}
	if seen["T2"] != 0 || seen["T1"] != 2 || seen["T3"] != 2 {
		return fmt.Errorf("entries seen per transfer: %v", seen)
	}
	fmt.Printf("transactions: T1 and T3 (a request consumed in its transaction) committed, 4 entries; balances alice=%d bob=%d carol=%d\n",
		balance["alice"], balance["bob"], balance["carol"])
	return nil
}
