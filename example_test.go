package amqpactor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// Every example runs on the in-process broker; swap inproc.New() for
// amqpactor.Dial(url) to run the same code on a live one.

// stop stops an example's App, bounded.
func stop(app *amqpactor.App) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := app.Stop(ctx); err != nil {
		fmt.Println("stop:", err)
	}
}

func ExampleNew() {
	app := amqpactor.New(inproc.New(), amqpactor.WithName("greeter"))

	got := make(chan string, 1)
	_, err := app.Subscribe(amqpactor.Queue("greetings"), func(ctx context.Context, m *amqpactor.Message) error {
		got <- string(m.Body)
		return nil // accepted
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer stop(app)

	if err := app.Publish(ctx, amqpactor.Queue("greetings"), &amqpactor.Message{Body: []byte("hello")}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(<-got)
	// Output: hello
}

// What a handler returns decides the outcome: here a failure is retried
// (modified{delivery-failed}: redelivered with delivery-count + 1) until the
// RetryPolicy's last attempt, which is rejected instead.
func ExampleApp_Subscribe() {
	app := amqpactor.New(inproc.New())
	attempts := make(chan uint32, 3)
	_, err := app.Subscribe(amqpactor.Queue("jobs"), func(ctx context.Context, m *amqpactor.Message) error {
		attempts <- m.DeliveryCount
		return errors.New("the database is down")
	}, amqpactor.WithRetry(amqpactor.RetryPolicy{MaxDeliveries: 3}), amqpactor.WithCredit(16))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer stop(app)

	if err := app.Publish(ctx, amqpactor.Queue("jobs"), &amqpactor.Message{Body: []byte("job-1")}); err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		fmt.Println("attempt with delivery-count", <-attempts)
	}
	// Output:
	// attempt with delivery-count 0
	// attempt with delivery-count 1
	// attempt with delivery-count 2
}

// Publish waits for the broker's outcome. A message the broker does not
// accept is an *OutcomeError; Settled publishes at-most-once and returns as
// soon as the transfer is written.
func ExampleApp_Publish() {
	broker := inproc.New()
	app := amqpactor.New(broker)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer stop(app)

	// Orders of one customer share a group-id: a subscriber handles them
	// one at a time, in order.
	err := app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{
		Body: []byte(`{"id":1}`), ContentType: "application/json", GroupID: "customer-7",
	})
	fmt.Println("accepted:", err == nil)

	err = app.Publish(ctx, amqpactor.Topic("metrics"), &amqpactor.Message{Body: []byte("cpu=3")}, amqpactor.Settled())
	fmt.Println("written:", err == nil)

	broker.RejectPublish(amqpactor.Queue("audit"), "amqp:unauthorized-access", "no audit for you")
	err = app.Publish(ctx, amqpactor.Queue("audit"), &amqpactor.Message{Body: []byte("x")})
	var oe *amqpactor.OutcomeError
	if errors.As(err, &oe) {
		fmt.Println("not accepted:", oe.Outcome)
	}
	// Output:
	// accepted: true
	// written: true
	// not accepted: rejected (amqp:unauthorized-access: no audit for you)
}

// Request sends a request and waits, until its context ends, for the reply
// whose correlation-id matches.
func ExampleApp_Request() {
	app := amqpactor.New(inproc.New())
	_, err := app.Subscribe(amqpactor.Queue("clock"), amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: []byte("12:00 in " + string(req.Body))}, nil
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer stop(app)

	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	defer rcancel()
	reply, err := app.Request(rctx, amqpactor.Queue("clock"), &amqpactor.Message{Body: []byte("Lisbon"), MessageID: "req-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(reply.Body), "for", reply.CorrelationID)
	// Output: 12:00 in Lisbon for req-1
}

// Responder turns a function of a request into a handler: its reply goes to
// the request's reply-to with the request's correlation-id (or message-id).
// An error (or Reject) is answered with an error reply, which Request
// returns at once as a *RemoteError.
func ExampleResponder() {
	app := amqpactor.New(inproc.New())
	square := amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		var n int
		if _, err := fmt.Sscan(string(req.Body), &n); err != nil {
			return nil, amqpactor.Reject(err)
		}
		return &amqpactor.Message{Body: fmt.Appendf(nil, "%d", n*n)}, nil
	})
	if _, err := app.Subscribe(amqpactor.Queue("square"), square); err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer stop(app)

	for _, n := range []string{"7", "12"} {
		reply, err := app.Request(ctx, amqpactor.Queue("square"), &amqpactor.Message{Body: []byte(n), CorrelationID: "sq-" + n})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s squared is %s (correlation-id %v)\n", n, reply.Body, reply.CorrelationID)
	}
	_, err := app.Request(ctx, amqpactor.Queue("square"), &amqpactor.Message{Body: []byte("seven")})
	var re *amqpactor.RemoteError
	if errors.As(err, &re) {
		fmt.Printf("seven: %s: %s\n", re.Condition, re.Description)
	}
	// Output:
	// 7 squared is 49 (correlation-id sq-7)
	// 12 squared is 144 (correlation-id sq-12)
	// seven: amqpactor:rejected: expected integer
}

// Everything published in a transaction becomes visible at commit, and
// nothing of it after a rollback.
func ExampleApp_Transaction() {
	app := amqpactor.New(inproc.New())
	got := make(chan string, 4)
	_, err := app.Subscribe(amqpactor.Queue("ledger"), func(ctx context.Context, m *amqpactor.Message) error {
		got <- string(m.Body)
		return nil
	}, amqpactor.WithPartitions(1))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer stop(app)

	ledger := amqpactor.Queue("ledger")
	err = app.Transaction(ctx, func(tx *amqpactor.Tx) error {
		_ = tx.Publish(ctx, ledger, &amqpactor.Message{Body: []byte("rolled back: debit 500")})
		return errors.New("insufficient funds") // rollback
	})
	fmt.Println("first transaction:", err)

	err = app.Transaction(ctx, func(tx *amqpactor.Tx) error {
		if err := tx.Publish(ctx, ledger, &amqpactor.Message{Body: []byte("debit 30")}); err != nil {
			return err
		}
		return tx.Publish(ctx, ledger, &amqpactor.Message{Body: []byte("credit 30")})
	})
	fmt.Println("second transaction:", err)
	fmt.Println(<-got)
	fmt.Println(<-got)
	// Output:
	// first transaction: insufficient funds
	// second transaction: <nil>
	// debit 30
	// credit 30
}

// A handler consumes and produces atomically: the order is accepted by the
// same commit that publishes its invoice, or neither happens.
func ExampleTx_Accept() {
	app := amqpactor.New(inproc.New())
	orders, invoices := amqpactor.Queue("orders"), amqpactor.Queue("invoices")
	got := make(chan string, 1)
	_, err := app.Subscribe(orders, func(ctx context.Context, m *amqpactor.Message) error {
		return app.Transaction(ctx, func(tx *amqpactor.Tx) error {
			invoice := &amqpactor.Message{Body: append([]byte("invoice for "), m.Body...)}
			if err := tx.Publish(ctx, invoices, invoice); err != nil {
				return err
			}
			return tx.Accept(m)
		})
	})
	if err == nil {
		_, err = app.Subscribe(invoices, func(ctx context.Context, m *amqpactor.Message) error {
			got <- string(m.Body)
			return nil
		})
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer stop(app)
	if err := app.Publish(ctx, orders, &amqpactor.Message{Body: []byte("order 7")}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(<-got)
	// Output:
	// invoice for order 7
}

type Order struct {
	ID       int    `json:"id"`
	Customer string `json:"customer"`
}

// Typed decodes JSON bodies into T. A body that does not decode is rejected
// at once (amqp:decode-error) and never retried: the handler does not see it.
func ExampleTyped() {
	broker := inproc.New()
	app := amqpactor.New(broker)
	got := make(chan Order, 1)
	_, err := app.Subscribe(amqpactor.Queue("orders"), amqpactor.Typed(func(ctx context.Context, o Order, m *amqpactor.Message) error {
		got <- o
		return nil
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}

	// One group-id: handled in this order.
	_ = app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("not json"), GroupID: "acme"})
	_ = app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte(`{"id":7,"customer":"acme"}`), GroupID: "acme"})
	o := <-got
	fmt.Printf("order %d of %s\n", o.ID, o.Customer)
	stop(app) // every outcome is settled once the App has stopped
	dead := broker.DeadLetters("orders")
	fmt.Println("dead letters:", len(dead), string(dead[0].GetData()))
	// Output:
	// order 7 of acme
	// dead letters: 1 not json
}

// WithTracerProvider sends the App's spans to an OpenTelemetry SDK (here an
// in-memory exporter; in a service, an OTLP exporter). The trace context
// travels in application-properties, so the handler continues the
// publisher's trace.
func ExampleWithTracerProvider() {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	app := amqpactor.New(inproc.New(), amqpactor.WithTracerProvider(tp))
	traces := make(chan string, 1)
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(ctx context.Context, m *amqpactor.Message) error {
		traces <- fmt.Sprint(m.Headers["traceparent"] != nil)
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if err := app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("o-1")}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("traceparent in application-properties:", <-traces)
	stop(app) // the handler's span has ended once the App has stopped

	var names []string
	spans := exp.GetSpans()
	for _, s := range spans {
		names = append(names, s.Name+" ("+strings.ToLower(s.SpanKind.String())+")")
	}
	sort.Strings(names)
	fmt.Println(strings.Join(names, ", "))
	fmt.Println("one trace:", len(spans) == 2 && spans[0].SpanContext.TraceID() == spans[1].SpanContext.TraceID())
	// Output:
	// traceparent in application-properties: true
	// process orders (consumer), publish orders (producer)
	// one trace: true
}

// AsyncAPI describes the App: here, the channels and operations of one
// subscription and one address published to.
func ExampleApp_AsyncAPI() {
	app := amqpactor.New(inproc.New(), amqpactor.WithName("shop"))
	_, err := app.Subscribe(amqpactor.Queue("orders"), amqpactor.Typed(func(ctx context.Context, o Order, m *amqpactor.Message) error {
		return nil
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer stop(app)
	_ = app.Publish(ctx, amqpactor.Topic("shipped"), &amqpactor.Message{Body: []byte(`{"id":7}`)})

	doc, err := app.AsyncAPI()
	if err != nil {
		fmt.Println(err)
		return
	}
	var d struct {
		AsyncAPI   string
		Channels   map[string]any
		Operations map[string]any
	}
	_ = json.Unmarshal(doc, &d)
	fmt.Println("AsyncAPI", d.AsyncAPI)
	fmt.Println("channels:", sortedKeys(d.Channels))
	fmt.Println("operations:", sortedKeys(d.Operations))
	// Output:
	// AsyncAPI 3.0.0
	// channels: [queue-orders topic-shipped]
	// operations: [receive-shop_orders send-topic-shipped]
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
