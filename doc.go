// Package amqpactor is a runtime for AMQP 1.0 messaging in which every
// connection, session and link is a protoactor-go actor.
//
// A service declares subscriptions (handlers on addresses) and publishes;
// the runtime owns the connection, the links, credit, settlement,
// partitioned dispatch, retries, request/reply and transactions, and
// supervises all of it, so that a detached link or a lost connection is
// re-attached without losing a message.
//
// The same App runs on a live broker (Dial, with go-amqp on the wire) or on
// the in-process broker of package inproc, for tests and as a zero-setup
// default.
//
// What a handler returns decides the outcome of its delivery: nil accepts,
// Reject rejects, Release releases, Undeliverable modifies with
// undeliverable-here, and any other error (or a panic) modifies with
// delivery-failed so the broker redelivers it with delivery-count + 1.
package amqpactor
