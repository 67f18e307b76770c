package amqpactor

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
)

// OpenTelemetry.
//
// Every Publish, Request and Tx.Publish records a producer span named
// "publish <address>" ("request <address>" for Request) and injects its trace
// context into the message's application-properties (traceparent and
// tracestate, the W3C Trace Context headers, which any AMQP client can read).
// The caller's Headers map is never changed: the message that goes out
// carries a copy. Every handled delivery runs in a consumer span named
// "process <address>" whose parent is the context extracted from the
// delivery's application-properties, so a trace started in a publisher goes
// on in the subscriber, whichever AMQP client published. A batch handler's
// span links to the context of each message in the batch instead.
//
// Spans carry messaging.system "amqp1", messaging.destination.name (the
// address as the App names it), amqpactor.address.kind, messaging.operation
// .type, the message-id and correlation-id when they are strings,
// messaging.destination.subscription.name, and amqpactor.outcome: the outcome
// the handler's result maps to (a RetryPolicy.RetryAddress republish reads
// "retried"). A handler error or panic sets the span's status to Error.
//
// Metrics (all with messaging.system, messaging.destination.name and
// amqpactor.address.kind):
//
//	amqpactor.published          counter   messages published, by amqpactor.result
//	                                       (accepted, rejected, released, modified,
//	                                       settled for at-most-once, error)
//	amqpactor.publish.duration   histogram seconds from Publish to the broker's outcome
//	amqpactor.request.duration   histogram seconds from Request to the reply, by amqpactor.result
//	amqpactor.delivered          counter   deliveries handed to handlers
//	amqpactor.settled            counter   deliveries settled, by amqpactor.outcome
//	                                       (not counted for AtMostOnce subscriptions)
//	amqpactor.handler.duration   histogram seconds a handler ran, by amqpactor.result (ok, error)
//
// A reply published by Responder goes to a private address per requester:
// its span and metrics name the destination "(reply)" so that metrics keep a
// bounded number of series.
//
// Nothing is exported unless the App is given providers that export, or the
// global ones are set (otel.SetTracerProvider, otel.SetMeterProvider); with
// the defaults every span is non-recording and costs little.

const (
	instrumentationName = "github.com/amqpactor/amqpactor"
	messagingSystem     = "amqp1"
	replyDestination    = "(reply)"
)

// WithTracerProvider sets where spans go. Nil (the default) means
// otel.GetTracerProvider(), a no-op until the program sets a global one;
// trace/noop's provider starts no span at all (trace context that arrives
// with a delivery still passes on to what its handler publishes).
//
// Spans: "publish <address>" (producer) for Publish and Tx.Publish,
// "request <address>" (producer) for Request, "process <address>"
// (consumer) around each handler, a child of the publisher's span taken from
// the delivery's traceparent/tracestate application-properties. A batch
// handler's span links to every message's span instead. Attributes:
// messaging.system "amqp1", messaging.destination.name,
// messaging.operation.type, messaging.message.id,
// messaging.message.conversation_id, messaging.destination.subscription.name,
// amqpactor.address.kind and amqpactor.outcome (accepted, rejected,
// released, modified, or retried for a RetryAddress republish). A failed or
// panicking handler sets the span's status to Error.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *appConfig) { c.otel.tracerProvider = tp }
}

// WithMeterProvider sets where metrics go. Nil (the default) means
// otel.GetMeterProvider(), a no-op until the program sets a global one.
//
// Instruments (each with messaging.system, messaging.destination.name and
// amqpactor.address.kind): amqpactor.published (counter, by amqpactor.result:
// accepted, rejected, released, modified, settled, error),
// amqpactor.delivered (counter), amqpactor.settled (counter, by
// amqpactor.outcome; not for AtMostOnce subscriptions), and the histograms in
// seconds amqpactor.publish.duration, amqpactor.request.duration and
// amqpactor.handler.duration (by amqpactor.result: ok, error). Responder
// replies count under the destination "(reply)".
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *appConfig) { c.otel.meterProvider = mp }
}

// WithPropagator sets how trace context travels in application-properties.
// Nil (the default) means W3C Trace Context (traceparent, tracestate).
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *appConfig) { c.otel.propagator = p }
}

type otelConfig struct {
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	propagator     propagation.TextMapPropagator
}

// telemetry holds the App's tracer, propagator and instruments.
type telemetry struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	// w3cOnly: the propagator is the default one, which carries nothing
	// without a valid span context, so an injection can be skipped then.
	w3cOnly bool
	// noTracer: the provider is trace/noop's, so no span is started at all;
	// trace context in ctx still passes through.
	noTracer bool

	published, delivered, settled     metric.Int64Counter
	publishDur, requestDur, handleDur metric.Float64Histogram

	// replyState is the target of every Responder's reply, whatever its
	// address: one destination "(reply)", not one per requester.
	replyState *target
}

var (
	producerOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
	consumerOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	// Seconds: from a fraction of a millisecond to a slow handler.
	durationBuckets = metric.WithExplicitBucketBoundaries(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01,
		0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
)

func newTelemetry(cfg otelConfig, onErr func(error)) *telemetry {
	tp, mp, prop := cfg.tracerProvider, cfg.meterProvider, cfg.propagator
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	t := &telemetry{tracer: tp.Tracer(instrumentationName), prop: prop}
	if _, ok := tp.(tracenoop.TracerProvider); ok {
		t.noTracer = true
	}
	if cfg.tracerProvider == nil && unsetGlobal(tp) {
		// Nobody set a global provider before Start: OTel's own stand-in
		// would build a non-recording span and a context per message for
		// nothing, allocating on every delivery. Set the global provider
		// before Start, or pass WithTracerProvider, to get spans.
		t.noTracer = true
	}
	if prop == nil {
		t.prop, t.w3cOnly = propagation.TraceContext{}, true
	}
	m := mp.Meter(instrumentationName)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), durationBuckets)
		errs = append(errs, err)
		return h
	}
	t.published = counter("amqpactor.published", "{message}", "Messages published, by result.")
	t.delivered = counter("amqpactor.delivered", "{message}", "Deliveries handed to handlers.")
	t.settled = counter("amqpactor.settled", "{message}", "Deliveries settled, by outcome.")
	t.publishDur = histogram("amqpactor.publish.duration", "Time from Publish to the broker's outcome.")
	t.requestDur = histogram("amqpactor.request.duration", "Time from Request to its reply.")
	t.handleDur = histogram("amqpactor.handler.duration", "Time a handler ran.")
	if err := errors.Join(errs...); err != nil && onErr != nil {
		onErr(err)
	}
	t.replyState = newTarget(Raw(replyDestination), false)
	return t
}

// Results of a publish, as the amqpactor.result attribute spells them.
const (
	resAccepted = iota
	resRejected
	resReleased
	resModified
	resSettled
	resError
	numResults
)

var resultNames = [numResults]string{"accepted", "rejected", "released", "modified", "settled", "error"}

// target is what telemetry keeps per address sent to (see destination):
// precomputed span names and metric attributes, so the hot path allocates
// nothing for them.
type target struct {
	addr Address
	// kept: the target is in the App's destinations; spans to an address
	// that is not (past maxDestinations, a reply) say it is temporary.
	kept        bool
	publishName string
	requestName string
	spanAttrs   []attribute.KeyValue
	published   [numResults][]metric.AddOption
	pubDur      [numResults][]metric.RecordOption
	reqDur      [2][]metric.RecordOption // ok, error
}

func destAttrs(name string, kind address.Kind) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("messaging.system", messagingSystem),
		attribute.String("messaging.destination.name", name),
		attribute.String("amqpactor.address.kind", kind.String()),
	}
}

func newTarget(addr Address, kept bool) *target {
	t := &target{addr: addr, kept: kept, publishName: "publish " + addr.Name(), requestName: "request " + addr.Name()}
	base := destAttrs(addr.Name(), addr.Kind())
	if addr.Name() == replyDestination {
		base[2] = attribute.String("amqpactor.address.kind", "reply")
	}
	t.spanAttrs = append(append([]attribute.KeyValue(nil), base...),
		attribute.String("messaging.operation.type", "send"))
	for r := range numResults {
		set := attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), attribute.String("amqpactor.result", resultNames[r]))...)
		t.published[r] = []metric.AddOption{metric.WithAttributeSet(set)}
		t.pubDur[r] = []metric.RecordOption{metric.WithAttributeSet(set)}
	}
	for i, r := range []string{"ok", "error"} {
		set := attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), attribute.String("amqpactor.result", r))...)
		t.reqDur[i] = []metric.RecordOption{metric.WithAttributeSet(set)}
	}
	return t
}

// noSpan stands in for a span when the provider is trace/noop's: it records
// nothing, and ending it ends nothing of the caller's.
var noSpan trace.Span = tracenoop.Span{}

func (t *telemetry) start(ctx context.Context, name string, opts []trace.SpanStartOption) (context.Context, trace.Span) {
	if t.noTracer {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, name, opts...)
}

// startSend starts a producer span and returns the message to send: m
// itself when nothing is injected, else a copy with its own Headers map
// carrying the trace context.
//
// A message that already carries trace context, published from a context
// without a span (a RetryPolicy.RetryAddress republish, a message forwarded
// as it came), stays in its trace: the context it carries is the parent.
func (t *telemetry) startSend(ctx context.Context, name string, tg *target, m *Message, extra ...attribute.KeyValue) (context.Context, trace.Span, *Message) {
	fromMsg := false
	if m != nil && len(m.Headers) > 0 && !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = t.prop.Extract(ctx, headerCarrier(m.Headers))
		fromMsg = true
	}
	ctx, span := t.start(ctx, name, producerOpts)
	if span.IsRecording() {
		span.SetAttributes(tg.spanAttrs...)
		if tg.addr.Name() == replyDestination || !tg.kept {
			span.SetAttributes(attribute.Bool("messaging.destination.temporary", tg.addr.Name() == replyDestination))
		}
		span.SetAttributes(messageAttrs(m)...)
		span.SetAttributes(extra...)
	}
	if m == nil || (t.w3cOnly && !trace.SpanContextFromContext(ctx).IsValid()) || (fromMsg && !span.IsRecording()) {
		// Nothing to carry, or exactly what m carries already.
		return ctx, span, m
	}
	c := injectCarrier{src: m.Headers}
	t.prop.Inject(ctx, &c)
	if c.dst == nil {
		return ctx, span, m
	}
	cp := *m
	cp.Headers = c.dst
	return ctx, span, &cp
}

func messageAttrs(m *Message) []attribute.KeyValue {
	if m == nil {
		return nil
	}
	kv := make([]attribute.KeyValue, 0, 4)
	if s, ok := m.MessageID.(string); ok && s != "" {
		kv = append(kv, attribute.String("messaging.message.id", s))
	}
	if s, ok := m.CorrelationID.(string); ok && s != "" {
		kv = append(kv, attribute.String("messaging.message.conversation_id", s))
	}
	if m.Body != nil {
		kv = append(kv, attribute.Int("messaging.message.body.size", len(m.Body)))
	}
	if m.GroupID != "" {
		kv = append(kv, attribute.String("amqpactor.group_id", m.GroupID))
	}
	return kv
}

// publishResult classifies a publish's error.
func publishResult(err error, settled bool) int {
	if err == nil {
		if settled {
			return resSettled
		}
		return resAccepted
	}
	var oe *OutcomeError
	if errors.As(err, &oe) {
		switch oe.Outcome.Kind {
		case messages.Rejected:
			return resRejected
		case messages.Released:
			return resReleased
		case messages.Modified:
			return resModified
		}
	}
	return resError
}

func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// injectCarrier writes into a copy of src, made on the first Set, so the
// caller's map is never changed.
type injectCarrier struct {
	src, dst map[string]any
}

func (c *injectCarrier) Get(key string) string {
	m := c.dst
	if m == nil {
		m = c.src
	}
	s, _ := m[key].(string)
	return s
}

func (c *injectCarrier) Set(key, value string) {
	if c.dst == nil {
		c.dst = make(map[string]any, len(c.src)+2)
		for k, v := range c.src {
			c.dst[k] = v
		}
	}
	c.dst[key] = value
}

func (c *injectCarrier) Keys() []string {
	m := c.dst
	if m == nil {
		m = c.src
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// headerCarrier reads trace context from a delivery's application-properties.
type headerCarrier map[string]any

func (h headerCarrier) Get(key string) string { s, _ := h[key].(string); return s }
func (h headerCarrier) Set(key, value string) { h[key] = value }
func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// subTelemetry is what a subscription's wrapped handler precomputes.
type subTelemetry struct {
	spanName  string
	spanAttrs []attribute.KeyValue
	delivered []metric.AddOption
	settled   [messages.Modified + 1][]metric.AddOption
	handled   [2][]metric.RecordOption // ok, error
	retry     RetryPolicy
}

func newSubTelemetry(spec *protocol.SubscriptionSpec, retry RetryPolicy) *subTelemetry {
	base := destAttrs(spec.Address.Name(), spec.Address.Kind())
	st := &subTelemetry{spanName: "process " + spec.Address.Name(), retry: retry}
	st.spanAttrs = append(append([]attribute.KeyValue(nil), base...),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.subscription.name", spec.Name))
	st.delivered = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(base...))}
	for k := messages.Accepted; k <= messages.Modified; k++ {
		set := attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), attribute.String("amqpactor.outcome", k.String()))...)
		st.settled[k] = []metric.AddOption{metric.WithAttributeSet(set)}
	}
	for i, r := range []string{"ok", "error"} {
		set := attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), attribute.String("amqpactor.result", r))...)
		st.handled[i] = []metric.RecordOption{metric.WithAttributeSet(set)}
	}
	return st
}

// instrument wraps the subscription's handlers and outcomer in spec with
// tracing and metrics. It runs once per subscription, before it attaches.
func (a *App) instrument(spec *protocol.SubscriptionSpec, retry RetryPolicy) {
	t := a.tel
	st := newSubTelemetry(spec, retry)
	if h := spec.Handler; h != nil {
		spec.Handler = t.handler(st, h)
	}
	if bh := spec.BatchHandler; bh != nil {
		spec.BatchHandler = t.batchHandler(st, bh)
	}
	if o := spec.Outcome; o != nil && !spec.Settled {
		spec.Outcome = func(ctx context.Context, err error, m *Message) messages.Outcome {
			out := o(ctx, err, m)
			if out.Kind >= messages.Accepted && out.Kind <= messages.Modified {
				t.settled.Add(ctx, 1, st.settled[out.Kind]...)
			}
			return out
		}
	}
}

func (t *telemetry) handler(st *subTelemetry, h protocol.Handler) protocol.Handler {
	return func(ctx context.Context, m *Message) (err error) {
		if m.Headers != nil {
			ctx = t.prop.Extract(ctx, headerCarrier(m.Headers))
		}
		ctx, span := t.start(ctx, st.spanName, consumerOpts)
		t.delivered.Add(ctx, 1, st.delivered...)
		// The clock only for a histogram that records (see tracedPublish).
		timed := t.handleDur.Enabled(ctx)
		var start time.Time
		if timed {
			start = time.Now()
		}
		returned := false
		defer func() {
			if timed {
				t.handleDur.Record(ctx, time.Since(start).Seconds(), st.handledOpts(returned, err)...)
			}
			if span.IsRecording() {
				span.SetAttributes(st.spanAttrs...)
				span.SetAttributes(messageAttrs(m)...)
				span.SetAttributes(attribute.Int("amqpactor.delivery_count", int(m.DeliveryCount)))
				outcomeOf := err
				if !returned {
					outcomeOf = errPanicked
				}
				span.SetAttributes(attribute.String("amqpactor.outcome", predictOutcome(outcomeOf, m, st.retry)))
				setHandlerStatus(span, returned, err)
			}
			span.End()
		}()
		err = h(ctx, m)
		returned = true
		return err
	}
}

// handledOpts are the options of a handling's duration: failed when the
// handler panicked (did not return) or returned an error.
func (st *subTelemetry) handledOpts(returned bool, err error) []metric.RecordOption {
	if !returned || err != nil {
		return st.handled[1]
	}
	return st.handled[0]
}

// setHandlerStatus marks span failed when the handler panicked (did not
// return) or returned an error.
func setHandlerStatus(span trace.Span, returned bool, err error) {
	switch {
	case !returned:
		span.SetStatus(codes.Error, "handler panicked")
	case err != nil && span.IsRecording():
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

// maxLinks bounds the links of a batch span.
const maxLinks = 128

func (t *telemetry) batchHandler(st *subTelemetry, h protocol.BatchHandler) protocol.BatchHandler {
	return func(ctx context.Context, ms []*Message) (err error) {
		ctx, span := t.start(ctx, st.spanName, consumerOpts)
		t.delivered.Add(ctx, int64(len(ms)), st.delivered...)
		if span.IsRecording() {
			span.SetAttributes(st.spanAttrs...)
			span.SetAttributes(attribute.Int("messaging.batch.message_count", len(ms)))
			for i, m := range ms {
				if i == maxLinks {
					break
				}
				if m.Headers == nil {
					continue
				}
				sc := trace.SpanContextFromContext(t.prop.Extract(context.Background(), headerCarrier(m.Headers)))
				if sc.IsValid() {
					span.AddLink(trace.Link{SpanContext: sc})
				}
			}
		}
		start := time.Now()
		returned := false
		defer func() {
			t.handleDur.Record(ctx, time.Since(start).Seconds(), st.handledOpts(returned, err)...)
			setHandlerStatus(span, returned, err)
			span.End()
		}()
		err = h(ctx, ms)
		returned = true
		return err
	}
}

var errPanicked = errors.New("handler panicked")

// predictOutcome names the outcome that err maps to, following the table of
// App.outcomer (handler.go) without its side effect: a failure that a
// RetryAddress policy republishes, or a Backoff one retries in place, reads
// "retried"; one given to a DeadLetter, "dead-lettered".
func predictOutcome(err error, m *Message, p RetryPolicy) string {
	if err == nil {
		return "accepted"
	}
	var rej *rejectError
	var rel *releaseError
	var und *undeliverableError
	switch {
	case errors.As(err, &rej):
		return "rejected"
	case errors.As(err, &rel):
		return "released"
	case errors.As(err, &und):
		return "modified"
	}
	if p.MaxDeliveries > 0 && retriedCount(m)+1 >= p.MaxDeliveries {
		if !p.DeadLetter.IsZero() {
			return "dead-lettered"
		}
		return "rejected"
	}
	if !p.RetryAddress.IsZero() || p.Backoff > 0 {
		return "retried"
	}
	return "modified"
}

func (a *App) telemetryError(err error) {
	a.log.Warn("amqpactor: OpenTelemetry instruments", "error", fmt.Sprint(err))
}

// unsetGlobal reports whether tp is OpenTelemetry's global stand-in, which
// otel.GetTracerProvider returns until otel.SetTracerProvider is called.
func unsetGlobal(tp trace.TracerProvider) bool {
	t := reflect.TypeOf(tp)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t != nil && t.PkgPath() == "go.opentelemetry.io/otel/internal/global"
}
