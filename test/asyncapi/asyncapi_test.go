// Package asyncapi_test validates amqpactor's AsyncAPI documents with the
// official AsyncAPI parser (npm @asyncapi/parser, run by validate.js under
// node), not only with our own reading of the specification.
//
// It needs node and node_modules here (setup.sh runs npm ci; make test calls
// it). Without them the tests skip loudly; under REQUIRE_LIVE=1 (CI) a skip
// is a failure.
package asyncapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"

	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// protoactor's dead-letter log throttle is a goroutine of its own that ends
// a second after the first dead letter.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

type diagnostic struct {
	Severity string `json:"severity"`
	Code     string `json:"code"`
	Message  string `json:"message"`
	Path     string `json:"path"`
}

type verdict struct {
	Errors      int          `json:"errors"`
	Parsed      bool         `json:"parsed"`
	Version     string       `json:"version"`
	Channels    []string     `json:"channels"`
	Operations  []string     `json:"operations"`
	Messages    []string     `json:"messages"`
	Diagnostics []diagnostic `json:"diagnostics"`
}

// needParser skips (or, under REQUIRE_LIVE=1, fails) when node or the
// parser is missing.
func needParser(t *testing.T) string {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		livetest.Missing(t, "the AsyncAPI parser validation cannot run: "+what+
			" (run `bash test/asyncapi/setup.sh` or `make test`)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not on PATH")
	}
	if _, err := os.Stat(filepath.Join("node_modules", "@asyncapi", "parser", "package.json")); err != nil {
		missing("test/asyncapi/node_modules has no @asyncapi/parser")
	}
	return node
}

// validate runs the official parser on doc.
func validate(t *testing.T, node string, doc []byte) verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "validate.js")
	cmd.Stdin = bytes.NewReader(doc)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "validate.js: %s", stderr.String())
	var v verdict
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &v), "validate.js printed: %s", stdout.String())
	return v
}

func requireValid(t *testing.T, v verdict) {
	t.Helper()
	var errs []string
	for _, d := range v.Diagnostics {
		t.Logf("parser %s: %s (%s) at %q", d.Severity, d.Message, d.Code, d.Path)
		if d.Severity == "error" {
			errs = append(errs, d.Message+" at "+d.Path)
		}
	}
	require.Zero(t, v.Errors, "the AsyncAPI parser found errors:\n%s", strings.Join(errs, "\n"))
	require.True(t, v.Parsed)
	require.Equal(t, "3.0.0", v.Version)
}

// The quickstart's own document — its four subscriptions and the addresses
// it published to while it ran on the in-process broker — passes the
// official parser with no errors.
func TestQuickstartAsyncAPIPassesTheParser(t *testing.T) {
	node := needParser(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "quickstart")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../examples/quickstart")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the quickstart: %s", out)

	docFile := filepath.Join(dir, "asyncapi.json")
	rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
	defer rcancel()
	out, err = exec.CommandContext(rctx, bin, "-asyncapi", docFile).CombinedOutput()
	require.NoError(t, err, "running the quickstart: %s", out)
	doc, err := os.ReadFile(docFile)
	require.NoError(t, err)

	v := validate(t, node, doc)
	requireValid(t, v)
	require.Subset(t, v.Channels, []string{"queue-quickstart_orders", "queue-quickstart_flaky", "queue-quickstart_prices", "queue-quickstart_audit"})
	require.Contains(t, v.Messages, "Order", "the Typed handler's payload is a message of its own")
	require.Contains(t, v.Operations, "request-queue-quickstart_prices")
}

type Shipment struct {
	ID      string            `json:"id"`
	Parcels []Parcel          `json:"parcels"`
	Labels  map[string]string `json:"labels,omitempty"`
	At      time.Time         `json:"at"`
	Next    *Shipment         `json:"next,omitempty"`
}

type Parcel struct {
	Weight  float64 `json:"weight"`
	Fragile bool    `json:"fragile,omitempty"`
}

// A document with every kind of subscription, on a live-broker connector in
// the RabbitMQ 4 dialect (never started: the document needs no broker),
// passes too, and holds no credential of the URL.
func TestEveryKindOfSubscriptionPassesTheParser(t *testing.T) {
	node := needParser(t)
	const password = "hunter2-secret"
	app := amqpactor.New(amqpactor.Dial("amqp://ops:"+password+"@127.0.0.1:5672/",
		amqpactor.WithDialect(amqpactor.RabbitMQ4)), amqpactor.WithName("shipping"))
	_, err := app.Subscribe(amqpactor.Queue("shipments"), amqpactor.Typed(func(ctx context.Context, s Shipment, m *amqpactor.Message) error {
		return nil
	}), amqpactor.WithRetry(amqpactor.RetryPolicy{MaxDeliveries: 5, RetryAddress: amqpactor.Queue("shipments.retry")}))
	require.NoError(t, err)
	_, err = app.Subscribe(amqpactor.Queue("parcels"), amqpactor.Typed(func(ctx context.Context, p []Parcel, m *amqpactor.Message) error {
		return nil
	}))
	require.NoError(t, err)
	_, err = app.SubscribeBatch(amqpactor.Topic("tracking"), func(ctx context.Context, ms []*amqpactor.Message) error { return nil },
		amqpactor.WithBatch(50, 20*time.Millisecond))
	require.NoError(t, err)
	_, err = app.Subscribe(amqpactor.Queue("quotes"), amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return nil, nil
	}))
	require.NoError(t, err)
	_, err = app.Subscribe(amqpactor.Raw("legacy/feed"), func(ctx context.Context, m *amqpactor.Message) error { return nil },
		amqpactor.AtMostOnce())
	require.NoError(t, err)

	doc, err := app.AsyncAPI()
	require.NoError(t, err)
	require.NotContains(t, string(doc), password)
	v := validate(t, node, doc)
	requireValid(t, v)
	require.ElementsMatch(t, []string{"queue-shipments", "queue-shipments_retry", "queue-parcels", "topic-tracking",
		"queue-quotes", "raw-legacy_feed"}, v.Channels)
	require.ElementsMatch(t, []string{"Shipment", "ParcelList", "AMQPMessage"}, v.Messages)
}

// The parser is no rubber stamp: a broken document fails it.
func TestTheParserRejectsABrokenDocument(t *testing.T) {
	node := needParser(t)
	v := validate(t, node, []byte(`{"asyncapi":"3.0.0","info":{"title":"x"},"channels":{"c":{"address":7}}}`))
	require.NotZero(t, v.Errors, "diagnostics: %+v", v.Diagnostics)
	require.False(t, v.Parsed)
}
