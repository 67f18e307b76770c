package debug_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/debug"
	"github.com/amqpactor/amqpactor/inproc"
)

// protoactor's dead-letter log throttle is a goroutine of its own that ends
// a second after the first dead letter.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

func fetch(t *testing.T, url string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header.Get("Content-Type"), string(b)
}

func TestHandlerServesTreeAndAsyncAPI(t *testing.T) {
	app := amqpactor.New(inproc.New(), amqpactor.WithName("dbg"))
	handled := make(chan struct{}, 1)
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(ctx context.Context, m *amqpactor.Message) error {
		handled <- struct{}{}
		return nil
	})
	require.NoError(t, err)

	mux := http.NewServeMux()
	mux.Handle("/debug/amqpactor/", http.StripPrefix("/debug/amqpactor", debug.Handler(app)))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	base := srv.URL + "/debug/amqpactor"

	// Before Start there is no tree, but there is a document.
	code, _, _ := fetch(t, base+"/tree")
	require.Equal(t, http.StatusServiceUnavailable, code)
	code, _, body := fetch(t, base+"/asyncapi.json")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"queue-orders"`)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("o")}))
	select {
	case <-handled:
	case <-ctx.Done():
		t.Fatal("the handler never ran")
	}

	code, ctype, body := fetch(t, base+"/")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "text/html; charset=utf-8", ctype)
	for _, link := range []string{`href="tree"`, `href="tree.txt"`, `href="asyncapi.json"`, `EventSource("events?tree=1")`} {
		require.Contains(t, body, link)
	}

	code, ctype, body = fetch(t, base+"/tree")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "application/json", ctype)
	var tree amqpactor.Node
	require.NoError(t, json.Unmarshal([]byte(body), &tree))
	require.Equal(t, "connection", tree.Kind)
	var kinds []string
	var walk func(n *amqpactor.Node)
	walk = func(n *amqpactor.Node) {
		kinds = append(kinds, n.Kind)
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(&tree)
	require.Subset(t, kinds, []string{"connection", "publisher", "sender", "subscription", "receiver", "dispatcher", "partition"})

	for _, u := range []string{base + "/tree.txt", base + "/tree?format=text"} {
		code, ctype, body = fetch(t, u)
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, ctype, "text/plain")
		lines := strings.Split(strings.TrimSpace(body), "\n")
		require.True(t, strings.HasPrefix(lines[0], tree.Name+" (connection)"), lines[0])
		require.Contains(t, body, "\n  ", "children are indented")
		require.Contains(t, body, "(receiver)")
	}

	code, ctype, body = fetch(t, base+"/asyncapi.json")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "application/json", ctype)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &doc))
	require.Equal(t, "3.0.0", doc["asyncapi"])
	require.Equal(t, "dbg", doc["info"].(map[string]any)["title"])

	code, _, _ = fetch(t, base+"/nothing")
	require.Equal(t, http.StatusNotFound, code)
}

func TestWriteTree(t *testing.T) {
	var b strings.Builder
	require.NoError(t, debug.WriteTree(&b, &amqpactor.Node{
		Name: "root", Kind: "connection", State: "attached", Address: "inproc", Broker: "RabbitMQ 4.3.6",
		Children: []*amqpactor.Node{{
			Name: "sender:orders", Kind: "sender", State: "restarting", Address: "queue:orders", Restarts: 2,
			LastError: "detached", Counters: map[string]uint64{"published": 3, "confirmed": 2, "credit": 0},
		}},
	}))
	require.Equal(t, "root (connection) [attached] inproc broker=\"RabbitMQ 4.3.6\"\n"+
		"  sender:orders (sender) [restarting] queue:orders restarts=2 confirmed=2 published=3 lastError=\"detached\"\n", b.String())
}
