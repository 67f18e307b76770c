package debug_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/debug"
	"github.com/amqpactor/amqpactor/inproc"
)

// servedApp is an App on the in-process broker named name, with a
// subscription named sub on "orders" and onChange its WithStateChanges,
// whose debug handler srv serves (the caller closes it); it is not started.
func servedApp(t *testing.T, name, sub string, onChange func(amqpactor.StateChange)) (app *amqpactor.App, srv *httptest.Server) {
	t.Helper()
	app = amqpactor.New(inproc.New(), amqpactor.WithName(name),
		amqpactor.WithBackoff(5*time.Millisecond, 50*time.Millisecond), amqpactor.WithStateChanges(onChange))
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(ctx context.Context, m *amqpactor.Message) error { return nil },
		amqpactor.WithSubscriptionName(sub))
	require.NoError(t, err)
	return app, httptest.NewServer(debug.Handler(app))
}

// openSSE reads the server-sent events of url on a goroutine of its own
// until ctx ends, calling on with each data line and the name of the event
// it belongs to; done closes when the goroutine returns.
func openSSE(t *testing.T, ctx context.Context, url string, on func(event, data string)) (done chan struct{}, contentType string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	done = make(chan struct{})
	go func() {
		defer close(done)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20) // a tree snapshot is one long line
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				on(event, strings.TrimPrefix(line, "data: "))
			}
		}
	}()
	return done, res.Header.Get("Content-Type")
}
