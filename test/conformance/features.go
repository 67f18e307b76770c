package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// testRequestReply: Request gets the Responder's reply, correlated by
// correlation-id (the request's own, else its message-id), also when many
// requests are in flight at once.
func testRequestReply(e *env) {
	q := e.queue("rpc")
	server := e.startedApp()
	e.subscribe(server, q, amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: append([]byte("re:"), req.Body...), Headers: map[string]any{"seen-reply-to": req.ReplyTo != ""}}, nil
	}))
	client := e.startedApp()

	rep, err := client.Request(e.ctx, q, &amqpactor.Message{MessageID: "req-1", Body: []byte("one")})
	require.NoError(e, err)
	require.Equal(e, "re:one", string(rep.Body))
	require.Equal(e, "req-1", rep.CorrelationID, "the reply correlates to the request's message-id")
	require.Equal(e, true, rep.Headers["seen-reply-to"], "the request carried a reply-to")

	rep, err = client.Request(e.ctx, q, &amqpactor.Message{MessageID: "req-2", CorrelationID: "corr-2", Body: []byte("two")})
	require.NoError(e, err)
	require.Equal(e, "re:two", string(rep.Body))
	require.Equal(e, "corr-2", rep.CorrelationID, "the reply keeps the request's correlation-id")

	rep, err = client.Request(e.ctx, q, &amqpactor.Message{Body: []byte("three")})
	require.NoError(e, err, "a request without ids gets one")
	require.Equal(e, "re:three", string(rep.Body))

	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf("par-%d", i)
			rep, err := client.Request(e.ctx, q, &amqpactor.Message{Body: []byte(body)})
			switch {
			case err != nil:
				errs[i] = err
			case string(rep.Body) != "re:"+body:
				errs[i] = fmt.Errorf("request %q got reply %q", body, rep.Body)
			}
		}()
	}
	wg.Wait()
	require.NoError(e, errors.Join(errs...), "concurrent requests")
}

// testRequestNoReply: a request nobody answers ends with its context, and
// the requester keeps working afterwards.
func testRequestNoReply(e *env) {
	silent := e.queue("silent")
	client := e.startedApp()
	// Someone takes the request and never answers.
	got := e.gate()
	e.subscribe(client, silent, func(ctx context.Context, m *amqpactor.Message) error {
		got.open()
		return nil
	})
	ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err := client.Request(ctx, silent, &amqpactor.Message{Body: []byte("anyone?")})
	require.ErrorIs(e, err, context.DeadlineExceeded)
	require.Less(e, time.Since(begin), waitFor/2, "Request did not end with its context")
	e.await(got, "the request to be delivered") // it was; nobody answered

	q := e.queue("rpc")
	e.subscribe(client, q, amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: []byte("pong")}, nil
	}))
	rep, err := client.Request(e.ctx, q, &amqpactor.Message{Body: []byte("ping")})
	require.NoError(e, err, "a request after one that timed out")
	require.Equal(e, "pong", string(rep.Body))
}

// testTransactions: nothing published in a transaction is visible before
// commit, and nothing of a rolled back one ever is. Without transactions,
// Transaction fails with ErrNotSupported and never runs its function.
func testTransactions(e *env) {
	q := e.queue("txn")
	rec := &recorder{}
	marker := e.gate()
	app := e.startedApp()
	// One partition: the handler sees the queue's order.
	e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		rec.add("h", m)
		if m.MessageID == "marker-1" {
			marker.open()
		}
		return nil
	}, amqpactor.WithPartitions(1))

	if !e.f.Features.Transactions {
		ran := false
		err := app.Transaction(e.ctx, func(tx *amqpactor.Tx) error { ran = true; return nil })
		require.ErrorIs(e, err, amqpactor.ErrNotSupported, "Transaction on a broker without transactions")
		require.False(e, ran, "the transaction's function ran although there is no transaction")
		return
	}

	var kept *amqpactor.Tx
	err := app.Transaction(e.ctx, func(tx *amqpactor.Tx) error {
		kept = tx
		for _, id := range []string{"t1", "t2", "t3"} {
			if err := tx.Publish(e.ctx, q, msg(id)); err != nil {
				return err
			}
		}
		var ae *amqpactor.AddressError
		if err := tx.Publish(e.ctx, amqpactor.Queue(""), msg("bad")); !errors.As(err, &ae) {
			return fmt.Errorf("a transactional publish to an empty address: got %v, want *AddressError", err)
		}
		// A plain publish after them overtakes them: they are not on the
		// queue yet.
		if err := app.Publish(e.ctx, q, msg("marker-1")); err != nil {
			return err
		}
		if !marker.wait() {
			return errors.New("the marker never arrived")
		}
		if n := rec.count("t1") + rec.count("t2") + rec.count("t3"); n > 0 {
			return fmt.Errorf("%d transactional messages visible before commit", n)
		}
		return nil
	})
	require.NoError(e, err, "committed transaction")
	e.eventually(func() bool { return rec.count("t1")+rec.count("t2")+rec.count("t3") == 3 }, "committed messages")
	require.Error(e, kept.Publish(e.ctx, q, msg("late")), "a publish on a discharged transaction")

	sentinel := errors.New("change of plan")
	err = app.Transaction(e.ctx, func(tx *amqpactor.Tx) error {
		if err := tx.Publish(e.ctx, q, msg("r1")); err != nil {
			return err
		}
		return sentinel
	})
	require.ErrorIs(e, err, sentinel, "Transaction returns the function's error")
	e.publish(app, q, msg("marker-2"))
	e.eventually(func() bool { return rec.count("marker-2") == 1 }, "the marker after the rollback")
	e.stop(app)
	require.Zero(e, rec.count("r1"), "a rolled back message was delivered")
	require.Zero(e, rec.count("late"))
	for _, id := range []string{"t1", "t2", "t3", "marker-1", "marker-2"} {
		require.Equal(e, 1, rec.count(id), "calls for %s", id)
	}
	if b, ok := e.hooks(); ok {
		require.Zero(e, b.QueueDepth(q.Name()), "a rolled back message is waiting on the queue")
	}
}

// testTransactionalAccept: a handler consumes and produces atomically. Its
// first attempt at each message publishes and accepts inside a transaction
// that it rolls back: nothing is published and the message comes back. The
// second commits: the publish is visible and the message accepted, even
// though the handler then returns an error. Nothing of the input is left,
// which a second App proves after the first stopped.
func testTransactionalAccept(e *env) {
	in, out := e.queue("txaccept-in"), e.queue("txaccept-out")
	const n = 20
	rec, outs := &recorder{}, &recorder{}
	plan := errors.New("roll back")
	afterCommit := errors.New("failed after the commit")
	var mu sync.Mutex
	tried := map[string]bool{}
	var misuse []error
	app := e.startedApp()
	e.subscribe(app, out, func(ctx context.Context, m *amqpactor.Message) error { outs.add("out", m); return nil })
	e.subscribe(app, in, func(ctx context.Context, m *amqpactor.Message) error {
		rec.add("h", m)
		id := m.MessageID.(string)
		if strings.HasPrefix(id, "plain") {
			// Acknowledged as usual, on a link whose earlier deliveries
			// were settled by transactions.
			return nil
		}
		mu.Lock()
		first := !tried[id]
		tried[id] = true
		mu.Unlock()
		if !e.f.Features.Transactions {
			ran := false
			err := app.Transaction(ctx, func(tx *amqpactor.Tx) error { ran = true; return tx.Accept(m) })
			if !errors.Is(err, amqpactor.ErrNotSupported) || ran {
				mu.Lock()
				misuse = append(misuse, fmt.Errorf("without transactions: err %v, ran %v", err, ran))
				mu.Unlock()
			}
			return nil
		}
		var kept *amqpactor.Tx
		err := app.Transaction(ctx, func(tx *amqpactor.Tx) error {
			kept = tx
			prefix := "c-"
			if first {
				prefix = "r-"
			}
			if err := tx.Publish(ctx, out, msg(prefix+id)); err != nil {
				return err
			}
			if err := tx.Accept(m); err != nil {
				return err
			}
			if tx.Accept(nil) == nil || tx.Accept(msg("not-a-delivery")) == nil {
				mu.Lock()
				misuse = append(misuse, errors.New("Accept of nil or of a message no subscription holds succeeded"))
				mu.Unlock()
			}
			if first {
				return plan
			}
			return nil
		})
		if kept != nil && kept.Accept(m) == nil {
			mu.Lock()
			misuse = append(misuse, errors.New("Accept on a discharged transaction succeeded"))
			mu.Unlock()
		}
		switch {
		case first && errors.Is(err, plan):
			return err // back to the queue
		case !first && err == nil:
			return afterCommit // the commit accepted it: this changes nothing
		}
		mu.Lock()
		misuse = append(misuse, fmt.Errorf("%s (first %v): %w", id, first, err))
		mu.Unlock()
		return err
	}, amqpactor.WithPartitions(1))
	want := ids("txa", n)
	for _, id := range want {
		e.publish(app, in, msg(id))
	}
	if !e.f.Features.Transactions {
		e.eventually(func() bool { return rec.n() == n }, "every message handled")
		e.stop(app)
		require.Empty(e, misuse)
		return
	}
	e.eventually(func() bool { return outs.n() >= n }, "the committed publishes")
	e.publish(app, in, msg("marker"))
	e.eventually(func() bool { return outs.count("c-marker") == 1 }, "the marker, rolled back once and committed")
	e.publish(app, in, msg("plain-1"))
	e.eventually(func() bool { return rec.count("plain-1") == 1 }, "a plain delivery after the transactions")
	e.stop(app)
	mu.Lock()
	require.Empty(e, misuse, "unexpected transaction results")
	mu.Unlock()
	for _, id := range append(want, "marker") {
		require.Equal(e, 2, rec.count(id), "handler calls for %s: a rollback, then a commit", id)
		require.Equal(e, 1, outs.count("c-"+id), "committed publishes for %s", id)
		require.Zero(e, outs.count("r-"+id), "rolled back publishes for %s", id)
	}
	if b, ok := e.hooks(); ok {
		require.Zero(e, b.QueueDepth(in.Name()), "input left on the queue")
	}
	// Anything the commits did not settle would be the queue's again now.
	again := &recorder{}
	app2 := e.startedApp()
	e.subscribe(app2, in, func(ctx context.Context, m *amqpactor.Message) error { again.add("again", m); return nil })
	e.publish(app2, in, msg("marker-2"))
	e.eventually(func() bool { return again.count("marker-2") == 1 }, "the second App's marker")
	e.stop(app2)
	require.Equal(e, 1, again.n(), "deliveries the commits accepted came back: %d", again.n()-1)
}

type order struct {
	ID  string `json:"id"`
	Qty int    `json:"qty"`
}

// testTyped: Typed decodes JSON bodies; a payload it cannot decode is
// rejected at once: the typed function is not called and there is one
// attempt only.
func testTyped(e *env) {
	q := e.queue("typed")
	rec := &recorder{}
	var mu sync.Mutex
	decoded := map[string]order{}
	typed := amqpactor.Typed(func(ctx context.Context, o order, m *amqpactor.Message) error {
		mu.Lock()
		decoded[m.MessageID.(string)] = o
		mu.Unlock()
		return nil
	})
	app := e.startedApp()
	sub := e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		rec.add("h", m)
		return typed(ctx, m)
	})
	send := func(id, ct, body string) {
		e.publish(app, q, &amqpactor.Message{MessageID: id, ContentType: ct, Body: []byte(body)})
	}
	send("json", "application/json", `{"id":"o-1","qty":3}`)
	send("plain", "", `{"id":"o-2","qty":4}`)
	send("vendor", "application/vnd.orders+json; charset=utf-8", `{"id":"o-3","qty":5}`)
	send("broken", "application/json", `{"id": "o-4", "qty":`)
	send("text", "text/plain", `{"id":"o-5","qty":6}`)
	e.eventually(func() bool {
		return countersAre(app, sub, map[string]uint64{"accepted": 3, "rejected": 2})
	}, "three accepted, two rejected")
	c := counters(app, sub)
	require.Zero(e, c["modified"], "an undecodable payload was retried: %v", c)
	e.stop(app)
	require.Equal(e, 1, rec.count("broken"), "attempts of an undecodable payload")
	require.Equal(e, 1, rec.count("text"), "attempts of a payload of another content-type")
	mu.Lock()
	require.Equal(e, map[string]order{
		"json":   {ID: "o-1", Qty: 3},
		"plain":  {ID: "o-2", Qty: 4},
		"vendor": {ID: "o-3", Qty: 5},
	}, decoded, "the typed function ran for exactly the decodable messages")
	mu.Unlock()
	if b, ok := e.hooks(); ok {
		dead := b.DeadLetters(q.Name())
		require.Len(e, dead, 2)
		for _, d := range dead {
			require.Equal(e, string(amqp.ErrCondDecodeError), d.Annotations["x-opt-inproc-condition"])
		}
	}
}
