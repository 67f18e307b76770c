// Package inproc owns the in-process AMQP broker: a transport.Connector whose
// connections, sessions and links are plain Go objects, so an application
// built for a live broker runs in tests (and as a zero-setup default) with the
// same wire semantics and no network.
//
// What it owns:
//
//   - Nodes and routing. Routing is by exact address. Queue and Raw addresses
//     name anycast queues ("orders::billing" is simply the queue of that name):
//     their receivers compete, round robin between the receivers that have
//     credit. Attaching a receiver to a queue creates it; DeclareQueue creates
//     one ahead of any receiver. A Topic gives every receiver link its own
//     non-durable subscription queue that lives as long as the link. A message
//     sent where no queue or subscription exists is dropped (and still
//     accepted, as a broker would).
//   - The wire form. A message is encoded with MarshalBinary when it is
//     published and decoded into a fresh *amqp.Message at each delivery, so
//     receivers never share objects and a message that could not cross a real
//     wire fails here too.
//   - Credit and settlement. A receiver gets transfers only while it has credit
//     granted by IssueCredit. Outcomes behave as on a broker: accepted removes,
//     rejected removes and dead-letters (DeadLetters), released puts the
//     message back at the head of its queue, modified{delivery-failed} does so
//     and counts the failure in the header's delivery-count,
//     modified{undeliverable-here} never offers it to that receiver again. A
//     detached link's unsettled deliveries go back to the head of their queue
//     in their original order and are redelivered with first-acquirer false.
//   - Dynamic reply nodes (Features.DynamicSource) and transactions
//     (Conn implements transport.Transactional): nothing published in a
//     transaction is visible before Commit.
//   - Fault injection and introspection for tests: DetachLinks,
//     DropConnections, RefuseAttach, RejectPublish, QueueDepth, Unsettled,
//     DeadLetters, Links.
//
// Errors look like go-amqp's, wrapped in the seam's *transport.LinkError
// (Op "attach", "send", "receive" or "settle"; Address in kind:name form):
//
//   - a local Close of the link, session or connection: Err is an
//     *amqp.LinkError, *amqp.SessionError or *amqp.ConnError with a nil
//     RemoteErr;
//   - DetachLinks and RefuseAttach: Err is an *amqp.LinkError whose RemoteErr
//     (an *amqp.Error) carries the condition and description;
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
// expiry) is tested only against a live broker.
package inproc
