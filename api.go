package amqpactor

import (
	"time"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// Connector is where the wire goes: Dial for a live broker, inproc.New for
// the in-process one.
type Connector = transport.Connector

// Address names a queue, a topic or a raw address. Build one with Queue,
// Topic or Raw.
type Address = address.Address

// Queue names a queue: receivers compete for its messages. "orders::billing"
// is the fully qualified form (queue billing of address orders; Artemis only).
func Queue(name string) Address { return address.Queue(name) }

// Topic names a topic: every subscription (by its name) gets its own copy,
// which the Apps subscribing under that name share; see App.Subscribe.
func Topic(name string) Address { return address.Topic(name) }

// Stream names a stream: an append-only log that each subscription reads
// with a cursor of its own, from where WithStreamOffset says (by default
// the next message appended), without taking anything off it; a publish
// appends. On RabbitMQ 4 over AMQP 1.0 it is a queue declared with
// x-queue-type stream; the in-process broker has streams too. Every
// delivered Message carries its offset in Annotations["x-stream-offset"].
// A subscription that re-attaches (after a detach, a lost connection or a
// restart of its actors) goes on after the last offset it settled in
// order. See docs/GUIDE.md, "Streams".
func Stream(name string) Address { return address.Stream(name) }

// StreamOffset is where a stream subscription starts; see WithStreamOffset.
type StreamOffset = address.StreamOffset

// StreamFirst starts at the first message the stream holds.
func StreamFirst() StreamOffset { return address.StreamFirst() }

// StreamLast starts at the last chunk of messages the stream holds
// (RabbitMQ stores them in chunks; the in-process broker: the last
// message), then reads what is appended.
func StreamLast() StreamOffset { return address.StreamLast() }

// StreamNext starts with the next message appended (the default).
func StreamNext() StreamOffset { return address.StreamNext() }

// StreamAt starts at offset; 0 is the stream's first message ever.
func StreamAt(offset int64) StreamOffset { return address.StreamAt(offset) }

// StreamSince starts at the first message appended at or after t (RabbitMQ
// starts at the chunk that holds it, so a few earlier ones may come too).
func StreamSince(t time.Time) StreamOffset { return address.StreamSince(t) }

// Raw names an address that goes to the broker exactly as written.
func Raw(name string) Address { return address.Raw(name) }

// Partitioned names n queues, NAME.p0 … NAME.p{n-1}, that keep group-id
// order across every replica of a service (several Apps of the same name
// on one broker); n must be in 1..1024.
//
// App.Publish sends a message to partition FNV-1a(group-id) mod n (32-bit
// FNV-1a of the group-id's bytes, Address.PartitionFor); a message without
// a group-id goes round robin over the partitions, each App keeping its own
// turn, since it has no order to keep. App.Subscribe subscribes to all n
// queues, one subscription (and subscription actor) per queue, named
// NAME.p<i> after the subscription's own name; each queue has a single
// active consumer (RabbitMQ 4 x-single-active-consumer, Artemis exclusive
// queues, the in-process broker alike), so a group is handled by one
// replica at a time, in order, and the queues of a replica that leaves
// pass to the replica that attached next, with what it had not settled
// first. Within a replica WithPartitions dispatches each queue's messages
// as for any subscription. Request and Tx.Publish route as Publish does.
func Partitioned(name string, n int) Address { return address.Partitioned(name, n) }

// Dialect says how a broker spells addresses.
type Dialect = address.Dialect

// The dialects.
const (
	Artemis    = address.Artemis
	RabbitMQ4  = address.RabbitMQ4
	ServiceBus = address.ServiceBus
)

// Message is one AMQP message; see messages.Message for the field mapping.
type Message = messages.Message

// Outcome is how a broker settled a delivery; see messages.Outcome. The
// root package names it as it names Message, so a user needs one import.
type Outcome = messages.Outcome

// OutcomeError reports a publish that the broker did not accept.
type OutcomeError = messages.OutcomeError

// LinkError reports a link the broker refused or ended; it names the address
// and wraps the broker's *amqp.Error.
type LinkError = transport.LinkError

// NodeError fails a call whose work was waiting on a node of the tree that
// is gone (its supervisor stopped it, or it failed for good): it names the
// node's path, kind and address and wraps why. Health names the node too.
type NodeError = protocol.NodeError

// AddressError reports an address that is empty, malformed or not
// expressible in the connector's dialect.
type AddressError = address.Error

// Node is one node of the actor tree returned by App.Tree: its Name, Kind,
// PID (as text), Address, State (see StateChange), Restarts, LastError,
// Counters, Children and, on the connection node, the Broker reached
// (product and version, "RabbitMQ 4.3.6"), all with JSON tags; ActorPID returns the node's
// actor as an *actor.PID. The actors build it, so it is defined with their
// protocol, which is internal: this alias is how users name it.
type Node = protocol.Node

var (
	// ErrNotSupported is wrapped by errors for features the broker or the
	// wire library lacks (e.g. transactions on a live connector).
	ErrNotSupported = transport.ErrNotSupported
	// ErrStopped is returned for work handed to an App that is stopping or
	// stopped.
	ErrStopped = protocol.ErrStopped
	// ErrRequestsRestarted is wrapped by App.Request's error when the
	// requests actor restarted while the request waited for its reply (its
	// reply link is gone). Sending the request again is safe if the
	// responder is idempotent.
	ErrRequestsRestarted = protocol.ErrRequestsRestarted
)
