// Package amqpactor is a runtime for AMQP messaging in which protoactor-go
// actors own an App's connections, sessions and links.
//
// A service declares subscriptions (handlers on addresses) and publishes;
// the runtime owns the connection, the links, credit, settlement,
// partitioned dispatch, retries, request/reply and transactions, and
// supervises all of it, so that a detached link or a lost connection is
// re-attached without losing a message.
//
// The same App runs on any of three transports: an AMQP 1.0 broker (Dial,
// with go-amqp on the wire: transport/amqpwire), RabbitMQ over AMQP 0-9-1
// (Dial091, with amqp091-go on the wire: transport/amqp091), or the
// in-process broker of package inproc, for tests and as a zero-setup default.
//
// What a handler returns decides the outcome of its delivery: nil accepts,
// Reject rejects, Release releases, Undeliverable modifies with
// undeliverable-here, and any other error (or a panic) modifies with
// delivery-failed so the broker redelivers it with delivery-count + 1.
// WithRetry changes what a failure does: RetryPolicy.Backoff retries it in
// place, keeping group-id order, MaxDeliveries bounds the attempts and
// DeadLetter takes what has none left.
//
// Observability: every publish and every handled delivery is an
// OpenTelemetry span, and the W3C trace context travels in the message's
// application-properties (traceparent, tracestate), so a trace crosses
// services and AMQP clients; the App also counts and times what it
// publishes, delivers and settles. See WithTracerProvider, WithMeterProvider
// and WithPropagator; nothing is exported unless a provider is given or set
// globally. App.AsyncAPI describes the App as an AsyncAPI 3.0 document, and
// package debug serves it, with the live actor tree, on a debug port.
//
// Every subscription has a session of its own, and a connection holds only
// the broker's channel-max of sessions (RabbitMQ 4: 64): the App opens as
// many connections as its subscriptions need, each supervised on its own
// (connection, connection-2, ... in App.Tree), and keeps the publisher,
// requests and transactions on the first. WithMaxSessionsPerConnection
// lowers the broker's figure.
//
// Every wait on the broker is bounded. A dial, a session's begin or a link's
// attach by the context of the call it is for (Start's, for the connection
// and the subscriptions it attaches) and by 30 s of its own, whichever ends
// first; a close by its caller's deadline or WithCloseTimeout. Memory held
// by deliveries is bounded too: WithMaxInFlightBytes (256 MiB by default)
// withholds credit while the bytes received and not settled, plus those the
// credit out may bring, would pass it, across all subscriptions.
//
// Every state change of the connection, a session or a link (attached,
// detached, restarting, ..., stopped) is a StateChange, published on the
// actor system's EventStream and handed to WithStateChanges; package debug
// streams them too.
package amqpactor
