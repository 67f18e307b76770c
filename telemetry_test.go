package amqpactor_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// tracing is an in-memory OpenTelemetry SDK: spans are exported as they end.
type tracing struct {
	exp *tracetest.InMemoryExporter
	tp  *sdktrace.TracerProvider
}

func newTracing(t *testing.T) *tracing {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &tracing{exp: exp, tp: tp}
}

// span waits for the ended span called name.
func (tr *tracing) span(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	var found tracetest.SpanStub
	require.Eventually(t, func() bool {
		for _, s := range tr.exp.GetSpans() {
			if s.Name == name {
				found = s
				return true
			}
		}
		return false
	}, 5*time.Second, 2*time.Millisecond, "no span %q", name)
	return found
}

func attr(kvs []attribute.KeyValue, key string) string {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func start(t *testing.T, apps ...*amqpactor.App) {
	t.Helper()
	for _, app := range apps {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		require.NoError(t, app.Start(ctx))
		cancel()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, app.Stop(ctx))
		})
	}
}

// protoactorThrottle is protoactor's dead-letter log throttle: a goroutine
// of its own that ends a second after the first dead letter.
var protoactorThrottle = goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1")

// leakCheck verifies, after every cleanup of t (which stop the apps), that
// no goroutine is left.
func leakCheck(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, protoactorThrottle) })
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A trace started in one service's publisher goes on in another service's
// handler, across the in-process broker, through the W3C headers in
// application-properties.
func TestTraceContinuesFromPublisherToSubscriber(t *testing.T) {
	leakCheck(t)
	tr := newTracing(t)
	broker := inproc.New()
	pub := amqpactor.New(broker, amqpactor.WithName("checkout"), amqpactor.WithTracerProvider(tr.tp))
	sub := amqpactor.New(broker, amqpactor.WithName("billing"), amqpactor.WithTracerProvider(tr.tp))

	type seen struct {
		sc      trace.SpanContext
		headers map[string]any
	}
	got := make(chan seen, 1)
	_, err := sub.Subscribe(amqpactor.Queue("orders"), func(ctx context.Context, m *amqpactor.Message) error {
		got <- seen{trace.SpanContextFromContext(ctx), m.Headers}
		return nil
	})
	require.NoError(t, err)
	start(t, sub, pub)

	ctx := ctxT(t)
	ctx, parent := tr.tp.Tracer("test").Start(ctx, "place order")
	headers := map[string]any{"tenant": "acme"}
	require.NoError(t, pub.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("o-1"), Headers: headers, MessageID: "o-1"}))
	parent.End()
	require.Equal(t, map[string]any{"tenant": "acme"}, headers, "the caller's Headers map is not changed")

	var s seen
	select {
	case s = <-got:
	case <-ctx.Done():
		t.Fatal("the handler never ran")
	}
	require.Equal(t, parent.SpanContext().TraceID(), s.sc.TraceID(), "the handler runs in the publisher's trace")
	require.Equal(t, "acme", s.headers["tenant"], "the caller's headers travel")
	tp, ok := s.headers["traceparent"].(string)
	require.True(t, ok, "traceparent is an application-property: %v", s.headers)

	publish := tr.span(t, "publish orders")
	process := tr.span(t, "process orders")
	require.Equal(t, trace.SpanKindProducer, publish.SpanKind)
	require.Equal(t, trace.SpanKindConsumer, process.SpanKind)
	require.Equal(t, parent.SpanContext().SpanID(), publish.Parent.SpanID(), "publish is a child of the caller's span")
	require.Equal(t, publish.SpanContext.SpanID(), process.Parent.SpanID(), "process is a child of publish")
	require.True(t, process.Parent.IsRemote())
	require.Equal(t, fmt.Sprintf("00-%s-%s-01", publish.SpanContext.TraceID(), publish.SpanContext.SpanID()), tp)
	require.Equal(t, process.SpanContext.SpanID(), s.sc.SpanID(), "the handler's context holds the process span")

	require.Equal(t, "amqp1", attr(publish.Attributes, "messaging.system"))
	require.Equal(t, "orders", attr(publish.Attributes, "messaging.destination.name"))
	require.Equal(t, "send", attr(publish.Attributes, "messaging.operation.type"))
	require.Equal(t, "o-1", attr(publish.Attributes, "messaging.message.id"))
	require.Equal(t, "process", attr(process.Attributes, "messaging.operation.type"))
	require.Equal(t, "billing.orders", attr(process.Attributes, "messaging.destination.subscription.name"))
	require.Equal(t, "accepted", attr(process.Attributes, "amqpactor.outcome"))
	require.Equal(t, codes.Unset, process.Status.Code)
}

// A message from another AMQP client that carries a traceparent continues
// that client's trace, even when the publishing App traces nothing.
func TestTraceFromAnotherClientsHeaders(t *testing.T) {
	leakCheck(t)
	tr := newTracing(t)
	broker := inproc.New()
	pub := amqpactor.New(broker) // no tracer provider: the global no-op one
	sub := amqpactor.New(broker, amqpactor.WithTracerProvider(tr.tp))
	got := make(chan trace.SpanContext, 1)
	_, err := sub.Subscribe(amqpactor.Topic("events"), func(ctx context.Context, m *amqpactor.Message) error {
		got <- trace.SpanContextFromContext(ctx)
		return nil
	})
	require.NoError(t, err)
	start(t, sub, pub)

	const traceID, spanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	ctx := ctxT(t)
	require.NoError(t, pub.Publish(ctx, amqpactor.Topic("events"), &amqpactor.Message{Body: []byte("e"),
		Headers: map[string]any{"traceparent": "00-" + traceID + "-" + spanID + "-01", "tracestate": "vendor=x"}}))
	select {
	case sc := <-got:
		require.Equal(t, traceID, sc.TraceID().String())
		require.Equal(t, "vendor=x", sc.TraceState().String())
	case <-ctx.Done():
		t.Fatal("the handler never ran")
	}
	process := tr.span(t, "process events")
	require.Equal(t, spanID, process.Parent.SpanID().String())
}

// Request, the Responder's handler and its reply are one trace.
func TestTraceRequestReply(t *testing.T) {
	leakCheck(t)
	tr := newTracing(t)
	app := amqpactor.New(inproc.New(), amqpactor.WithTracerProvider(tr.tp))
	_, err := app.Subscribe(amqpactor.Queue("rpc"), amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: []byte("pong")}, nil
	}))
	require.NoError(t, err)
	start(t, app)
	rep, err := app.Request(ctxT(t), amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("ping")})
	require.NoError(t, err)
	require.Equal(t, "pong", string(rep.Body))

	request := tr.span(t, "request rpc")
	process := tr.span(t, "process rpc")
	reply := tr.span(t, "publish (reply)")
	require.Equal(t, request.SpanContext.TraceID(), process.SpanContext.TraceID())
	require.Equal(t, request.SpanContext.SpanID(), process.Parent.SpanID())
	require.Equal(t, process.SpanContext.SpanID(), reply.Parent.SpanID(), "the reply is published in the handler's span")
	require.Equal(t, "true", attr(reply.Attributes, "messaging.destination.temporary"))
}

// A failing handler marks its span as an error and names the outcome; the
// metrics count what was published, delivered and settled, and time the
// handlers.
func TestTelemetryOutcomesAndMetrics(t *testing.T) {
	leakCheck(t)
	tr := newTracing(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	app := amqpactor.New(inproc.New(), amqpactor.WithTracerProvider(tr.tp), amqpactor.WithMeterProvider(mp))
	done := make(chan struct{})
	_, err := app.Subscribe(amqpactor.Queue("work"), func(ctx context.Context, m *amqpactor.Message) error {
		switch string(m.Body) {
		case "bad":
			return amqpactor.Reject(errors.New("malformed"))
		case "flaky":
			if m.DeliveryCount == 0 {
				return errors.New("try again")
			}
			close(done)
		}
		return nil
	})
	require.NoError(t, err)
	start(t, app)
	ctx := ctxT(t)
	for _, b := range []string{"ok", "bad", "flaky"} {
		require.NoError(t, app.Publish(ctx, amqpactor.Queue("work"), &amqpactor.Message{Body: []byte(b)}))
	}
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("nowhere"), &amqpactor.Message{Body: []byte("x")}, amqpactor.Settled()))
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the flaky message never succeeded")
	}

	// Four deliveries: ok, bad, flaky (failed), flaky (redelivered).
	outcomes := func() map[string]int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(ctx, &rm))
		return sumBy(rm, "amqpactor.settled", "amqpactor.outcome")
	}
	require.Eventually(t, func() bool {
		o := outcomes()
		return o["accepted"] == 2 && o["rejected"] == 1 && o["modified"] == 1
	}, 5*time.Second, 5*time.Millisecond, "settled by outcome: %v", outcomes())

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	require.Equal(t, map[string]int64{"accepted": 3, "settled": 1}, sumBy(rm, "amqpactor.published", "amqpactor.result"))
	require.Equal(t, map[string]int64{"work": 4}, sumBy(rm, "amqpactor.delivered", "messaging.destination.name"))
	require.Equal(t, map[string]uint64{"ok": 2, "error": 2}, histogramCounts(rm, "amqpactor.handler.duration", "amqpactor.result"))
	require.Equal(t, map[string]uint64{"accepted": 3, "settled": 1}, histogramCounts(rm, "amqpactor.publish.duration", "amqpactor.result"))

	var rejected, modified int
	for _, s := range tr.exp.GetSpans() {
		if s.Name != "process work" {
			continue
		}
		switch attr(s.Attributes, "amqpactor.outcome") {
		case "rejected":
			rejected++
			require.Equal(t, codes.Error, s.Status.Code)
		case "modified":
			modified++
			require.Equal(t, codes.Error, s.Status.Code)
			require.Equal(t, "try again", s.Status.Description)
		}
	}
	require.Equal(t, 1, rejected)
	require.Equal(t, 1, modified)
}

// A batch handler's span links to the trace of every message in the batch.
func TestTraceBatchLinks(t *testing.T) {
	leakCheck(t)
	tr := newTracing(t)
	app := amqpactor.New(inproc.New(), amqpactor.WithTracerProvider(tr.tp))
	got := make(chan int, 4)
	_, err := app.SubscribeBatch(amqpactor.Queue("batch"), func(ctx context.Context, ms []*amqpactor.Message) error {
		got <- len(ms)
		return nil
	}, amqpactor.WithBatch(3, time.Second))
	require.NoError(t, err)
	start(t, app)
	ctx := ctxT(t)
	var traces []trace.TraceID
	for i := range 3 {
		pctx, span := tr.tp.Tracer("test").Start(ctx, fmt.Sprint("producer ", i))
		require.NoError(t, app.Publish(pctx, amqpactor.Queue("batch"), &amqpactor.Message{Body: []byte("m")}))
		span.End()
		traces = append(traces, span.SpanContext().TraceID())
	}
	n := 0
	for n < 3 {
		select {
		case k := <-got:
			n += k
		case <-ctx.Done():
			t.Fatal("the batch never arrived")
		}
	}
	var linked []trace.TraceID
	require.Eventually(t, func() bool {
		linked = linked[:0]
		for _, s := range tr.exp.GetSpans() {
			if s.Name == "process batch" {
				for _, l := range s.Links {
					linked = append(linked, l.SpanContext.TraceID())
				}
			}
		}
		return len(linked) == 3
	}, 5*time.Second, 2*time.Millisecond)
	require.ElementsMatch(t, traces, linked)
}

// Without providers nothing is recorded and nothing is added to messages.
func TestNoTracingAddsNoHeaders(t *testing.T) {
	leakCheck(t)
	app := amqpactor.New(inproc.New())
	got := make(chan map[string]any, 1)
	_, err := app.Subscribe(amqpactor.Queue("plain"), func(ctx context.Context, m *amqpactor.Message) error {
		got <- m.Headers
		return nil
	})
	require.NoError(t, err)
	start(t, app)
	ctx := ctxT(t)
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("plain"), &amqpactor.Message{Body: []byte("x"), Headers: map[string]any{"a": "b"}}))
	select {
	case h := <-got:
		require.Equal(t, map[string]any{"a": "b"}, h)
	case <-ctx.Done():
		t.Fatal("the handler never ran")
	}
}

func sumBy(rm metricdata.ResourceMetrics, name, key string) map[string]int64 {
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key(key))
				out[v.Emit()] += dp.Value
			}
		}
	}
	return out
}

func histogramCounts(rm metricdata.ResourceMetrics, name, key string) map[string]uint64 {
	out := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key(key))
				out[v.Emit()] += dp.Count
			}
		}
	}
	return out
}

// With trace/noop's provider no span is started, but trace context that
// arrives with a delivery still goes on with what its handler publishes.
func TestNoopProviderPassesTraceContextThrough(t *testing.T) {
	leakCheck(t)
	app := amqpactor.New(inproc.New(), amqpactor.WithTracerProvider(tracenoop.NewTracerProvider()))
	_, err := app.Subscribe(amqpactor.Queue("in"), func(ctx context.Context, m *amqpactor.Message) error {
		return app.Publish(ctx, amqpactor.Queue("out"), &amqpactor.Message{Body: m.Body})
	})
	require.NoError(t, err)
	got := make(chan map[string]any, 1)
	_, err = app.Subscribe(amqpactor.Queue("out"), func(ctx context.Context, m *amqpactor.Message) error {
		got <- m.Headers
		return nil
	})
	require.NoError(t, err)
	start(t, app)
	ctx := ctxT(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("in"), &amqpactor.Message{Body: []byte("x"), Headers: map[string]any{"traceparent": tp}}))
	select {
	case h := <-got:
		require.Equal(t, tp, h["traceparent"])
	case <-ctx.Done():
		t.Fatal("the second handler never ran")
	}
}

// A failed delivery that a RetryAddress policy republishes stays in the
// trace of the original publish.
func TestRetryAddressRepublishStaysInTheTrace(t *testing.T) {
	leakCheck(t)
	tr := newTracing(t)
	app := amqpactor.New(inproc.New(), amqpactor.WithTracerProvider(tr.tp))
	_, err := app.Subscribe(amqpactor.Queue("jobs"), func(ctx context.Context, m *amqpactor.Message) error {
		return errors.New("try elsewhere")
	}, amqpactor.WithRetry(amqpactor.RetryPolicy{RetryAddress: amqpactor.Queue("jobs.retry")}))
	require.NoError(t, err)
	got := make(chan trace.SpanContext, 1)
	_, err = app.Subscribe(amqpactor.Queue("jobs.retry"), func(ctx context.Context, m *amqpactor.Message) error {
		got <- trace.SpanContextFromContext(ctx)
		return nil
	})
	require.NoError(t, err)
	start(t, app)
	ctx := ctxT(t)
	pctx, parent := tr.tp.Tracer("test").Start(ctx, "enqueue")
	require.NoError(t, app.Publish(pctx, amqpactor.Queue("jobs"), &amqpactor.Message{Body: []byte("j")}))
	parent.End()
	select {
	case sc := <-got:
		require.Equal(t, parent.SpanContext().TraceID(), sc.TraceID())
	case <-ctx.Done():
		t.Fatal("the retry copy never arrived")
	}
	retry := tr.span(t, "publish jobs.retry")
	first := tr.span(t, "publish jobs")
	require.Equal(t, first.SpanContext.SpanID(), retry.Parent.SpanID(), "the republish is a child of the first publish")
}
