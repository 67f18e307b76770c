package debug_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/debug"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/inproc/inproctest"
)

func post(t *testing.T, url string, header map[string]string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

// paused tells whether the subscription's receiver shows itself paused.
func paused(t *testing.T, app *amqpactor.App, sub string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	for _, n := range tree.Children {
		if n.Name == "subscription:"+sub {
			for _, c := range n.Children {
				if c.Kind == "receiver" {
					return c.Counters["paused"] == 1
				}
			}
		}
	}
	t.Fatalf("no subscription:%s in the tree", sub)
	return false
}

func TestControlPausesAndResumesBehindItsGuard(t *testing.T) {
	app := amqpactor.New(inproc.New(), amqpactor.WithName("ctl"))
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(ctx context.Context, m *amqpactor.Message) error { return nil },
		amqpactor.WithSubscriptionName("orders"))
	require.NoError(t, err)
	inproctest.Start(t, app)

	ro := httptest.NewServer(debug.Handler(app))
	defer ro.Close()
	rw := httptest.NewServer(debug.Handler(app, debug.WithControl()))
	defer rw.Close()
	page := map[string]string{debug.ControlHeader: "page"}

	// Off by default, whatever the request.
	code, body := post(t, ro.URL+"/subscriptions/orders/pause", page)
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "WithControl")
	require.False(t, paused(t, app, "orders"))

	// On: only with the header, and only from the page's own origin.
	code, _ = post(t, rw.URL+"/subscriptions/orders/pause", nil)
	require.Equal(t, http.StatusForbidden, code)
	code, _ = post(t, rw.URL+"/subscriptions/orders/pause", map[string]string{debug.ControlHeader: "x", "Origin": "http://evil.example"})
	require.Equal(t, http.StatusForbidden, code)
	code, _ = post(t, rw.URL+"/subscriptions/orders/pause", map[string]string{debug.ControlHeader: "x", "Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, code)
	code, _ = post(t, rw.URL+"/subscriptions/orders/pause", map[string]string{debug.ControlHeader: "x", "Origin": "null"})
	require.Equal(t, http.StatusForbidden, code)
	require.False(t, paused(t, app, "orders"))

	// POST only; unknown names and actions are 404.
	code, _, _ = fetch(t, rw.URL+"/subscriptions/orders/pause")
	require.Equal(t, http.StatusMethodNotAllowed, code)
	code, body = post(t, rw.URL+"/subscriptions/nothing/pause", page)
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, "nothing")
	code, _ = post(t, rw.URL+"/subscriptions/orders/delete", page)
	require.Equal(t, http.StatusNotFound, code)

	code, body = post(t, rw.URL+"/subscriptions/orders/pause", map[string]string{debug.ControlHeader: "page",
		"Origin": rw.URL, "Sec-Fetch-Site": "same-origin"})
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"subscription":"orders","paused":true}`, body)
	require.Eventually(t, func() bool { return paused(t, app, "orders") }, 5*time.Second, 5*time.Millisecond)
	code, body = post(t, rw.URL+"/subscriptions/orders/resume", page)
	require.Equal(t, http.StatusOK, code, body)
	require.Eventually(t, func() bool { return !paused(t, app, "orders") }, 5*time.Second, 5*time.Millisecond)
}

func TestPageHasItsPolicy(t *testing.T) {
	srv := httptest.NewServer(debug.Handler(amqpactor.New(inproc.New())))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/", nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	csp := res.Header.Get("Content-Security-Policy")
	// Nothing loads from elsewhere; the inline script runs by its hash.
	require.Contains(t, csp, "default-src 'none'")
	require.Contains(t, csp, "script-src 'sha256-")
	require.Contains(t, csp, "connect-src 'self'")
	require.NotContains(t, csp, "unsafe-inline")
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.False(t, strings.Contains(string(body), "http://") || strings.Contains(string(body), "https://"), "the page names no other site")
}

// TestControlRefusesAReboundHost: a page of another site whose name was
// rebound to the debug port's address sends its own name as Host and its own
// origin; with control on, only loopback hosts and WithAllowedHosts pass.
func TestControlRefusesAReboundHost(t *testing.T) {
	app := amqpactor.New(inproc.New(), amqpactor.WithName("rebind"))
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(ctx context.Context, m *amqpactor.Message) error { return nil },
		amqpactor.WithSubscriptionName("orders"))
	require.NoError(t, err)
	inproctest.Start(t, app)
	rw := httptest.NewServer(debug.Handler(app, debug.WithControl()))
	defer rw.Close()
	allowed := httptest.NewServer(debug.Handler(app, debug.WithControl(), debug.WithAllowedHosts("ops.example.com")))
	defer allowed.Close()
	ro := httptest.NewServer(debug.Handler(app))
	defer ro.Close()

	send := func(method, url, host string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, url, nil)
		require.NoError(t, err)
		req.Host = host
		req.Header.Set(debug.ControlHeader, "page")
		req.Header.Set("Origin", "http://"+host)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}
	for _, host := range []string{"evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.evil.example", "[::2]:80", "10.0.0.1"} {
		code, body := send(http.MethodPost, rw.URL+"/subscriptions/orders/pause", host)
		require.Equal(t, http.StatusForbidden, code, "Host %s: %s", host, body)
		require.Contains(t, body, "WithAllowedHosts")
		code, _ = send(http.MethodGet, rw.URL+"/tree", host)
		require.Equal(t, http.StatusForbidden, code, "Host %s reads nothing either while control is on", host)
	}
	require.False(t, paused(t, app, "orders"))
	code, _ := send(http.MethodGet, ro.URL+"/tree", "evil.example")
	require.Equal(t, http.StatusOK, code, "without control the handler only reads, for any Host")

	for _, host := range []string{"localhost", "LOCALHOST:9", "app.localhost", "127.0.0.1:1234", "127.9.9.9", "[::1]:80"} {
		code, body := send(http.MethodPost, rw.URL+"/subscriptions/orders/resume", host)
		require.Equal(t, http.StatusOK, code, "Host %s: %s", host, body)
	}
	code, body := send(http.MethodPost, allowed.URL+"/subscriptions/orders/pause", "ops.example.com:443")
	require.Equal(t, http.StatusOK, code, body)
	require.Eventually(t, func() bool { return paused(t, app, "orders") }, 5*time.Second, 5*time.Millisecond)
	code, _ = send(http.MethodPost, allowed.URL+"/subscriptions/orders/resume", "other.example.com")
	require.Equal(t, http.StatusForbidden, code)
}

// TestProbes: /livez follows App.Health and /readyz App.Ready: 503 with
// the reason before Start and after Stop, 200 while the App runs.
func TestProbes(t *testing.T) {
	app := amqpactor.New(inproc.New(), amqpactor.WithName("probes"))
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(ctx context.Context, m *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	srv := httptest.NewServer(debug.Handler(app))
	defer srv.Close()
	code, _, body := fetch(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "not started")
	code, _, _ = fetch(t, srv.URL+"/livez")
	require.Equal(t, http.StatusOK, code, "an App not started yet has not failed")
	inproctest.Start(t, app)
	require.Eventually(t, func() bool { code, _, _ := fetch(t, srv.URL+"/readyz"); return code == http.StatusOK }, 5*time.Second, 5*time.Millisecond)
	code, _, body = fetch(t, srv.URL+"/livez")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, app.Stop(ctx))
	code, _, body = fetch(t, srv.URL+"/livez")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "stopped")
}
