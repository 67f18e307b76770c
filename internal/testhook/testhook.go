// Package testhook holds what the module's own tests reach into an App
// with and a user must not: it is internal so that none of it is part of
// the public surface. Nothing in the runtime sends these messages or calls
// these functions.
package testhook

import "github.com/amqpactor/amqpactor/transport"

// Crash makes the sender, receiver, dispatcher, partition, subscription,
// publisher, requests, txn and connection actors (and the App's Publisher
// actor) panic when they receive one, so a test can make a supervisor
// restart them mid-stream.
type Crash struct{ Reason string }

// CrashRoot makes the App's root actor panic when it receives one (the
// root forwards every other message to the connection actor), so a test
// can see how the root's failures are decided.
type CrashRoot struct{ Reason string }

// ReplaceConnector puts app, an *amqpactor.App not yet started, on c
// instead of the connector it was built with; inproctest.Start runs a
// service's App on the in-process broker with it. The package amqpactor
// sets it when it is initialised, since this package may not import it.
var ReplaceConnector func(app any, c transport.Connector) error
