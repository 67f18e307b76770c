// Package address owns the names of things on a broker: queues, topics and raw
// addresses, and how each broker dialect spells them on the wire.
//
// An Address is a value checked once, before anything reaches the wire, so a
// malformed name or a form a dialect cannot express fails with an error that
// names the address instead of a refused attach from the broker.
package address

import (
	"fmt"
	"strconv"
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
	// KindPartitioned is a set of n queues NAME.p0 … NAME.p{n-1}, each with
	// a single active consumer; see Partitioned.
	KindPartitioned
)

func (k Kind) String() string {
	switch k {
	case KindQueue:
		return "queue"
	case KindTopic:
		return "topic"
	case KindRaw:
		return "raw"
	case KindPartitioned:
		return "partitioned"
	}
	return "invalid"
}

// Address names a node on a broker. The zero value is invalid.
type Address struct {
	kind Kind
	name string
	// parts is the partition count of a Partitioned address.
	parts int
	// single marks a partition queue: one active consumer at a time.
	single bool
	// stream marks a stream (see Stream).
	stream bool
}

// Queue names a queue. "orders::billing" is the fully qualified form: queue
// billing of address orders (Artemis only).
func Queue(name string) Address { return Address{kind: KindQueue, name: name} }

// Topic names a topic (a multicast address).
func Topic(name string) Address { return Address{kind: KindTopic, name: name} }

// Raw names an address that is sent to the broker as written.
func Raw(name string) Address { return Address{kind: KindRaw, name: name} }

// MaxPartitions bounds the partition count of a Partitioned address.
const MaxPartitions = 1024

// Partitioned names n queues, NAME.p0 … NAME.p{n-1}, that together carry
// one ordered stream per group-id across every replica of a service: a
// publish goes to partition PartitionFor(group-id), and each partition
// queue has a single active consumer, so one group is handled by one
// replica at a time, in order. n must be in 1..MaxPartitions.
func Partitioned(name string, n int) Address {
	return Address{kind: KindPartitioned, name: name, parts: n}
}

// Partitions reports n of a Partitioned address, 0 for any other.
func (a Address) Partitions() int {
	if a.kind != KindPartitioned {
		return 0
	}
	return a.parts
}

// Partition is the i-th partition queue of a Partitioned address: a Queue
// named NAME.p<i> that is declared (or attached) with a single active
// consumer. It is the zero Address when a is not Partitioned or i is out
// of range.
func (a Address) Partition(i int) Address {
	if a.kind != KindPartitioned || i < 0 || i >= a.parts {
		return Address{}
	}
	return Address{kind: KindQueue, name: a.name + ".p" + strconv.Itoa(i), single: true}
}

// PartitionFor is the partition a message with this group-id goes to: the
// 32-bit FNV-1a hash of the group-id's UTF-8 bytes modulo n. The hash is
// fixed (no seed), so every replica and every publisher, in any process,
// picks the same partition. It is -1 when a is not a valid Partitioned
// address.
func (a Address) PartitionFor(groupID string) int {
	if a.kind != KindPartitioned || a.parts < 1 || a.parts > MaxPartitions {
		return -1
	}
	// FNV-1a, inline: hash/fnv would allocate on every publish.
	h := uint32(2166136261)
	for i := 0; i < len(groupID); i++ {
		h ^= uint32(groupID[i])
		h *= 16777619
	}
	return int(h % uint32(a.parts))
}

// SingleActiveConsumer reports a partition queue (see Partition): the broker
// delivers to one attached receiver at a time.
func (a Address) SingleActiveConsumer() bool { return a.single }

// Kind reports the kind of node.
func (a Address) Kind() Kind { return a.kind }

// Name reports the name as the user wrote it.
func (a Address) Name() string { return a.name }

// IsZero reports whether a is the zero Address.
func (a Address) IsZero() bool { return a.kind == 0 && a.name == "" }

// String renders the address as kind:name, the form used in errors, logs and
// the actor tree.
func (a Address) String() string {
	if a.stream {
		return "stream:" + a.name
	}
	return a.kind.String() + ":" + a.name
}

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
	if a.kind < KindQueue || a.kind > KindPartitioned {
		return &Error{Address: a, Reason: "unknown address kind (use Queue, Topic, Raw or Partitioned)"}
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
	if a.kind == KindPartitioned {
		if a.parts < 1 || a.parts > MaxPartitions {
			return &Error{Address: a, Reason: fmt.Sprintf("partition count %d out of range 1..%d", a.parts, MaxPartitions)}
		}
		if strings.Contains(a.name, "::") {
			return &Error{Address: a, Reason: `a partitioned address names its own queues; "address::queue" is not allowed`}
		}
		return nil
	}
	if addr, q, ok := a.FQQN(); ok {
		if a.stream {
			return &Error{Address: a, Reason: `a stream has no "address::queue" form`}
		}
		if a.kind != KindQueue {
			return &Error{Address: a, Reason: "the address::queue form names a queue; use Queue"}
		}
		if addr == "" || q == "" || strings.Contains(q, "::") {
			return &Error{Address: a, Reason: `malformed fully qualified queue name, want "address::queue"`}
		}
	}
	return nil
}
