package live

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/amqpactor/amqpactor"
)

// TestTraceAcrossRabbitMQ4: a trace started in a publisher goes on in the
// subscriber's handler span of another App, through RabbitMQ 4: the
// traceparent travels in application-properties.
func TestTraceAcrossRabbitMQ4(t *testing.T) {
	u := brokerURL(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	dial := func() amqpactor.Connector { return amqpactor.Dial(u, amqpactor.WithDialect(amqpactor.RabbitMQ4)) }
	q := amqpactor.Queue(unique("live.trace"))

	handled := make(chan context.Context, 1)
	sub := amqpactor.New(dial(), amqpactor.WithTracerProvider(tp))
	_, err := sub.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		handled <- ctx
		return nil
	})
	require.NoError(t, err)
	start(t, sub)
	pub := amqpactor.New(dial(), amqpactor.WithTracerProvider(tp))
	start(t, pub)

	ctx, root := tp.Tracer("test").Start(bound(t), "checkout")
	require.NoError(t, pub.Publish(ctx, q, &amqpactor.Message{Body: []byte("traced")}))
	root.End()
	select {
	case <-handled:
	case <-time.After(15 * time.Second):
		t.Fatal("the message never reached the handler")
	}
	var process, publish tracetest.SpanStub
	require.Eventually(t, func() bool {
		for _, s := range exp.GetSpans() {
			switch s.Name {
			case "process " + q.Name():
				process = s
			case "publish " + q.Name():
				publish = s
			}
		}
		return process.Name != "" && publish.Name != ""
	}, 10*time.Second, 10*time.Millisecond, "spans: %v", exp.GetSpans().Snapshots())
	require.Equal(t, root.SpanContext().TraceID(), publish.SpanContext.TraceID())
	require.Equal(t, root.SpanContext().TraceID(), process.SpanContext.TraceID(), "the handler's span continues the publisher's trace")
	require.Equal(t, publish.SpanContext.SpanID(), process.Parent.SpanID(), "its parent is the publish span")
}
