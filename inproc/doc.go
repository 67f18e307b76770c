// Package inproc owns the in-process AMQP broker: a transport.Connector whose
// connections, sessions and links are plain Go objects, so an application
// built for a live broker runs in tests (and as a zero-setup default) with the
// same message semantics and no network.
//
// What it owns:
//
//   - Nodes and routing. Routing is by exact address. Queue and Raw addresses
//     name anycast queues ("orders::billing" is simply the queue of that name):
//     their receivers compete, round robin between the receivers that have
//     credit. Attaching a receiver to a queue creates it; DeclareQueue creates
//     one ahead of any receiver. A Topic receiver that names a subscription
//     (ReceiverOptions.Subscription) attaches to the topic's durable
//     subscription of that name: the queue "TOPIC::SUBSCRIPTION", created on
//     the first attach and kept, with what is published to it, as long as the
//     Broker lives, whatever links come and go; every receiver naming it
//     competes for its messages, as a shared durable subscription on Artemis.
//     A Topic receiver that is Ephemeral or names none gets its own
//     non-durable subscription queue that lives as long as the link. A
//     subscription queue bound with ReceiverOptions.BindingKeys gets only
//     the messages whose subject one of its keys matches, as a topic
//     exchange routes; each attach replaces the keys. A message sent where
//     no queue or subscription takes it is dropped (and still accepted, as
//     a broker would).
//   - Streams. A Stream address is an append-only log, created by the first
//     publish or attach and never truncated (stream.go): a receiver starts
//     where ReceiverOptions.StreamOffset says and transfers from a cursor of
//     its own, each message with its offset in the annotation
//     x-stream-offset (an int64); a settle takes nothing off the log, and a
//     link that ends hands nothing back. A receiver with a
//     ReceiverOptions.StreamFilter transfers only the messages it passes,
//     exactly: one of its filter values (x-stream-filter-value), each of
//     its headers and properties, its SQL expression (the subset RabbitMQ
//     evaluates, internal/sqlfilter). StreamLen reads a stream's length.
//   - Copies, not the wire form. Send, Txn.Publish and Broker.Publish take
//     the broker's own copy of the message before they return (data
//     sections in one new byte slice; properties, header, maps, byte
//     slices, lists and maps inside values all copied), so the publisher
//     may reuse or change its message at once. Every delivery, and every
//     DeadLetters result, is a fresh copy of that: no two deliveries (a
//     redelivery, another topic subscription) share anything a receiver
//     could change in place, maps and body bytes included. A delivery stays
//     its receiver's after it is settled, unless the receiver's user called
//     RecycleSettled (transport.Recycler, as the runtime's receivers do):
//     then Settle takes the delivery's memory back for a later one. The
//     broker's own copy is recycled once accepted wherever it went. What go-amqp
//     could not encode fails the publish with an error naming the section
//     (a type it has no encoding for, a nil pointer, a string that is not
//     UTF-8, an annotations key that is not a string, symbol or int), and
//     nothing is stored; nothing is encoded to find out. Values reach the
//     receiver as go-amqp's decoder would give them: int as int64, uint as
//     uint64, a symbol as a string, amqp.Null as nil, a pointer as its
//     value, times in whole milliseconds in the local zone, a map whose keys
//     are all strings or symbols as map[string]any, an empty list as nil, an
//     empty data section as a non-nil empty slice, the header's ttl in
//     whole milliseconds; Format and DeliveryTag are not carried. Arrays and
//     go-amqp's other own types are copied by a trip through its codec.
//   - Credit and settlement. A receiver gets transfers only while it has credit
//     granted by IssueCredit. Outcomes behave as on a broker: accepted removes,
//     rejected removes and dead-letters (DeadLetters), released puts the
//     message back at the head of its queue (behind any older message that
//     went back before it, so deliveries released one by one in their order
//     come again in that order), modified{delivery-failed} does so
//     and counts the failure in the header's delivery-count,
//     modified{undeliverable-here} never offers it to that receiver again. A
//     detached link's unsettled deliveries go back to the head of their queue
//     in their original order and are redelivered with first-acquirer false.
//   - Single active consumer. A queue a receiver attaches to with a partition
//     queue address (address.Partitioned's Partition, SingleActiveConsumer)
//     is flagged for good: it delivers only to the receiver attached first;
//     the others wait with their credit. When the active one detaches, its
//     unsettled deliveries go back to the head, in order, and the next in
//     attach order becomes active and gets them first, as RabbitMQ 4's
//     x-single-active-consumer and Artemis's exclusive queues do. Each
//     receiver is told whether it is the active one (OnActive), as
//     RabbitMQ 4.3 says with rabbitmq:active, and a receiver counts the
//     queue's receivers (transport.ConsumerCounter), as RabbitMQ's
//     consumer count does: what balances partitions across replicas.
//   - Expiry. A message expires at the earlier of its arrival plus its
//     header ttl and its absolute-expiry-time; an expired message is
//     dropped, never delivered, and counted (Expired). It is checked when a
//     message would be handed to a receiver (the first transfer or a
//     redelivery after released or modified), at the head of its queue
//     whenever the queue dispatches (a publish, new credit, a message put
//     back), and through the whole queue by QueueDepth;
//     a message already transferred is not taken back. A queue that never
//     held a message with an expiry reads no clock.
//   - The anonymous terminus (Features.AnonymousRelay; WithoutAnonymousRelay
//     turns it off): a sender attached with a zero address is a
//     transport.Relay, and each transfer goes where its properties.to names,
//     as a topic or a queue by DestAnnotation (as Artemis reads it), else to
//     the queue of that name, else to the topic of that name. A node that
//     does not exist answers released for that transfer only (a settled one
//     is dropped), as RabbitMQ 4 does; the link goes on.
//   - Dynamic reply nodes (Features.DynamicSource) and transactions
//     (Conn implements transport.Transactional): nothing published in a
//     transaction is visible before Commit.
//   - Fault injection and introspection for tests: DetachLinks,
//     EndSessions, DropConnections, RefuseAttach, RejectPublish, QueueDepth, Unsettled,
//     DeadLetters, Expired, Links, Subscriptions (QueueDepth and Unsettled read a durable
//     subscription by its queue name "TOPIC::SUBSCRIPTION").
//
// Errors look like go-amqp's, wrapped in the seam's *transport.LinkError
// (Op "attach", "send", "receive" or "settle"; Address in kind:name form):
//
//   - a local Close of the link, session or connection: Err is an
//     *amqp.LinkError, *amqp.SessionError or *amqp.ConnError with a nil
//     RemoteErr;
//   - DetachLinks and RefuseAttach: Err is an *amqp.LinkError whose RemoteErr
//     (an *amqp.Error) carries the condition and description;
//   - EndSessions: Err is an *amqp.SessionError whose RemoteErr carries the
//     condition and description, for every link of each session it ended
//     (an attach on that session fails the same way); the connection stays
//     open;
//   - DropConnections: Err is an *amqp.ConnError with a RemoteErr, and the
//     Conn's Err returns that *amqp.ConnError;
//   - Settle after the link ended: Err wraps ErrLinkEnded and the link's
//     cause;
//   - RejectPublish: no error; the Receipt yields a Rejected outcome with the
//     condition and description.
//
// The broker starts no goroutines: every call does its work on the caller's
// goroutine, receivers wait on a one-slot notify channel, and nothing is left
// running once the links and connections are closed.
//
// Behaviour that belongs to a real server (its own credit policy, creating an
// address on first publish, dead-letter policy, delivery limits, durability,
// dead-lettering of expired messages) is tested only against a live broker.
package inproc
