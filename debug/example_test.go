package debug_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/debug"
	"github.com/amqpactor/amqpactor/inproc"
)

// Mount the handler under a prefix of a debug port; here a test server
// stands in for the port.
func ExampleHandler() {
	app := amqpactor.New(inproc.New(), amqpactor.WithName("shop"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = app.Stop(ctx) }()

	mux := http.NewServeMux()
	mux.Handle("/debug/amqpactor/", http.StripPrefix("/debug/amqpactor", debug.Handler(app)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, path := range []string{"/tree.txt", "/asyncapi.json"} {
		res, err := http.Get(srv.URL + "/debug/amqpactor" + path)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		first, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
		fmt.Printf("%s %s: %s\n", path, res.Status, strings.TrimSpace(first))
	}
	// Output:
	// /tree.txt 200 OK: connection (connection) [attached] inproc max-sessions=65536
	// /asyncapi.json 200 OK: {
}

// On a debug port that is not public, WithControl lets the page pause and
// resume subscriptions; a script does the same with the header the page
// sets.
func ExampleWithControl() {
	app := amqpactor.New(inproc.New(), amqpactor.WithName("shop"))
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(ctx context.Context, m *amqpactor.Message) error { return nil },
		amqpactor.WithSubscriptionName("orders"))
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
	defer func() { _ = app.Stop(ctx) }()

	srv := httptest.NewServer(debug.Handler(app, debug.WithControl()))
	defer srv.Close()
	for _, h := range []string{"", debug.ControlHeader} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/subscriptions/orders/pause", nil)
		if h != "" {
			req.Header.Set(h, "script")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Printf("%s: %s", res.Status, body)
	}
	// Output:
	// 403 Forbidden: amqpactor debug: a control request needs the X-Amqpactor-Debug header
	// 200 OK: {"paused":true,"subscription":"orders"}
}
