// Package address owns the names of things on a broker: queues, topics and raw
// addresses, and how each broker dialect spells them on the wire.
//
// An Address is a value checked once, before anything reaches the wire, so a
// malformed name or a form a dialect cannot express fails with an error that
// names the address instead of a refused attach from the broker.
package address

import (
	"fmt"
	"strings"
)

// Kind says what sort of node an address names.
type Kind uint8

const (
	// KindQueue is an anycast node: receivers compete for its messages.
	KindQueue Kind = iota + 1
	// KindTopic is a multicast node: every subscription gets its own copy.
	KindTopic
	// KindRaw is passed to the broker exactly as written, with no capability.
	KindRaw
)

func (k Kind) String() string {
	switch k {
	case KindQueue:
		return "queue"
	case KindTopic:
		return "topic"
	case KindRaw:
		return "raw"
	}
	return "invalid"
}

// Address names a node on a broker. The zero value is invalid.
type Address struct {
	kind Kind
	name string
}

// Queue names a queue. "orders::billing" is the fully qualified form: queue
// billing of address orders (Artemis only).
func Queue(name string) Address { return Address{kind: KindQueue, name: name} }

// Topic names a topic (a multicast address).
func Topic(name string) Address { return Address{kind: KindTopic, name: name} }

// Raw names an address that is sent to the broker as written.
func Raw(name string) Address { return Address{kind: KindRaw, name: name} }

// Kind reports the kind of node.
func (a Address) Kind() Kind { return a.kind }

// Name reports the name as the user wrote it.
func (a Address) Name() string { return a.name }

// IsZero reports whether a is the zero Address.
func (a Address) IsZero() bool { return a.kind == 0 && a.name == "" }

// String renders the address as kind:name, the form used in errors, logs and
// the actor tree.
func (a Address) String() string { return a.kind.String() + ":" + a.name }

// FQQN splits a fully qualified queue name "address::queue". ok is false when
// the name has no "::".
func (a Address) FQQN() (addr, queue string, ok bool) {
	addr, queue, ok = strings.Cut(a.name, "::")
	return addr, queue, ok
}

// Error is returned for an address that is empty, malformed or not
// expressible in a dialect. It names the address.
type Error struct {
	Address Address
	Dialect Dialect
	Reason  string
}

func (e *Error) Error() string {
	if e.Dialect == 0 {
		return fmt.Sprintf("amqpactor: address %s: %s", e.Address, e.Reason)
	}
	return fmt.Sprintf("amqpactor: address %s (%s dialect): %s", e.Address, e.Dialect, e.Reason)
}

// Validate checks the parts of an address that do not depend on a dialect.
func (a Address) Validate() error {
	if a.kind < KindQueue || a.kind > KindRaw {
		return &Error{Address: a, Reason: "unknown address kind (use Queue, Topic or Raw)"}
	}
	if strings.TrimSpace(a.name) == "" {
		return &Error{Address: a, Reason: "empty name"}
	}
	if strings.ContainsAny(a.name, "\x00\r\n\t ") {
		return &Error{Address: a, Reason: "name contains whitespace or control characters"}
	}
	if a.kind == KindRaw {
		return nil
	}
	if addr, q, ok := a.FQQN(); ok {
		if a.kind != KindQueue {
			return &Error{Address: a, Reason: "the address::queue form names a queue; use Queue"}
		}
		if addr == "" || q == "" || strings.Contains(q, "::") {
			return &Error{Address: a, Reason: `malformed fully qualified queue name, want "address::queue"`}
		}
	}
	return nil
}
