// Package amqpwire is the go-amqp implementation of the transport seam: it
// opens the TCP (or TLS) connection itself, hands it to
// github.com/Azure/go-amqp, and wraps go-amqp's connection, sessions and links
// in the small interfaces of package transport.
//
// # Connections
//
// New returns a transport.Connector for one broker URL (amqp:// or amqps://).
// Connect dials with its own net.Dialer (TCP keepalive on, TCP_NODELAY set
// explicitly), wraps the socket in TLS with verification on for amqps://, and
// opens the AMQP connection. go-amqp writes each frame with its own system
// call; the socket it gets coalesces them instead (the write coalescer both
// transports share, transport/internal/coalesce): frames written while a
// write is under way go out together in the next one, which under load
// saves the client a system call per frame. Its Folder here folds a
// session's dispositions into first..last ranges, holding a growing range
// back for at most 1 ms (dispmerge.go). Credentials come from the URL (SASL PLAIN) unless
// Config.SASL says ANONYMOUS or EXTERNAL. PLAIN over plain TCP is refused for
// any host that is not a loopback address unless Config.InsecurePlain is set;
// the refusal happens before anything is dialled. Credentials never appear in
// errors, logs or String: every message names the URL as url.URL.Redacted
// spells it.
//
// Config.Failover lists more endpoints of the same broker cluster: Connect
// tries the one that connected last, then the others in order, and String
// names the endpoint the connector is on (the tree's connection node shows
// it). Every URL is checked before anything is dialled.
//
// Conn.Done closes as soon as go-amqp's connection ends; Conn.Err then says
// why (nil after Close).
//
// # Inbound guard
//
// go-amqp reads the connection through a guard of ours (guard.go), which
// follows the frames and checks every delivery's payload with
// internal/amqpscan before go-amqp decodes it, since go-amqp decodes in its
// own goroutine, where a panic or a stack overflow ends the process, and
// ends the link on a message it cannot decode. A delivery that fails the
// check, or is larger than Config.MaxMessageSize, arrives as a small poison
// message instead (transport.Poison says why), in as many frames as the peer
// sent; the runtime rejects it with amqp:decode-error and the link goes on.
// Frames over the 64 KiB max-frame-size go-amqp announces, frames the guard
// cannot follow, performatives with map keys go-amqp would panic on, and
// dispositions whose range go-amqp would walk for ever or for long (wider
// than 65,536 delivery-ids, or reaching 4294967295) end the connection (a
// *GuardError); the close go-amqp sends then carries
// amqp:connection:framing-error and the reason, and the runtime reconnects.
// Conn.PeerOffers reports the capabilities the broker's open offered.
//
// # Links
//
// Addresses are spelt by address.Render for the configured dialect. Senders
// ask for the address's capabilities on the target, receivers on the source.
// Receivers use manual credit only: nothing arrives until IssueCredit grants
// it. Settle maps messages.Outcome to accepted, rejected (condition and
// description), released or modified (delivery-failed, undeliverable-here).
// An unsettled Send returns a Receipt whose Wait yields the broker's outcome,
// so sends pipeline.
//
// Errors from links are *transport.LinkError values naming the address as
// attached and the operation ("attach", "send", "receive", "detach"); the
// broker's *amqp.Error stays reachable with errors.As. A context that ends
// first is reported as the context's error (errors.Is works), not as a
// LinkError, because the link itself is still fine.
//
// # The anonymous terminus
//
// Where the peer offers ANONYMOUS-RELAY (Features().AnonymousRelay:
// RabbitMQ 4 and Artemis; not Azure Service Bus), a sender attached with a
// zero address gets a target with a null address and is a *Relay: SendTo
// puts the dialect's spelling of each message's address in properties.to
// (on Artemis also x-opt-jms-dest, 0 for a queue, 1 for a topic), on a copy
// of the message. RabbitMQ 4 answers a transfer to a node that does not
// exist with released, for that transfer only; the link and the session go
// on. On RabbitMQ 4 SendTo declares a Queue or Topic as a named sender
// would, once per connection (it remembers up to 4096 names, then starts
// afresh); a Raw address, such as a reply-to, is never declared.
//
// # RabbitMQ 4
//
// RabbitMQ 4 never creates a node on attach, so with the RabbitMQ4 dialect a
// sender or receiver declares what it needs through the broker's AMQP
// management node (see Management) before it attaches:
//
//   - Queue(name): a durable quorum queue (classic when
//     ReceiverOptions.ClassicQueue). A receiver's quorum queue with a
//     ReceiverOptions.DeadLetter queue gets x-dead-letter-exchange "",
//     x-dead-letter-routing-key (that queue, declared first),
//     x-dead-letter-strategy at-least-once, x-overflow reject-publish and
//     x-delivery-limit (DeliveryLimit, when > 0); ReceiverOptions.QueueArguments
//     are added, one of ours with another value being an error naming the
//     key. RabbitMQ 4 answers a queue that exists without them with 409
//     ("inequivalent arg 'x-dead-letter-exchange' … current is none"): it is
//     used as it is, with a warning naming the arguments not applied.
//   - A partition queue of address.Partitioned (NAME.p<i>): the same, with
//     x-single-active-consumer: true, by senders and receivers alike, so
//     whichever comes first declares it the same way.
//   - Stream(name): a durable queue with x-queue-type stream, declared by
//     senders and receivers alike, with ReceiverOptions.QueueArguments; a
//     receiver attaches with the source filter rabbitmq:stream-offset-spec
//     of ReceiverOptions.StreamOffset ("first", "last", "next" as strings,
//     an offset as a ulong, a time as a timestamp), and with
//     ReceiverOptions.StreamFilter's parts: the filter values
//     (rabbitmq:stream-filter) with rabbitmq:stream-match-unfiltered
//     false; the headers and properties as
//     amqp:application-properties-filter and amqp:properties-filter
//     (which 4.0 takes and ignores); the SQL expression as sql-filter
//     (amqp:sql-filter), refused before 4.2 and failing the attach when
//     the broker's attach leaves it out. Other dialects refuse a
//     Stream (address.CheckStream), as the connector's CheckStream does
//     before Subscribe.
//   - Topic(name), send: a durable exchange of type "topic", routed by each
//     message's subject. A link to /exchanges/NAME would carry the empty
//     routing key, so the sender's link is attached to the anonymous
//     terminus instead (where the peer offers it, as RabbitMQ 4 does) and
//     each message goes to /exchanges/NAME/SUBJECT, percent-encoded, or to
//     /exchanges/NAME (the empty key) without a subject; SendTo spells a
//     topic alike.
//   - Topic(name), receive: the exchange as above, plus the subscription queue
//     address.Render names (NAME.SUBSCRIPTION), bound with each key of
//     ReceiverOptions.BindingKeys ("#" by default). A durable queue is bound
//     with exactly those on every attach: the keys bound last are recorded
//     as a binding from the internal exchange amqpactor.binding-keys to the
//     queue, with the keys in its arguments (the management node lists
//     bindings only by key), and the keys of the record that are not asked
//     for any more are unbound; a queue without a record counts as bound
//     with "#". By
//     default it is a durable quorum queue (classic when
//     ReceiverOptions.ClassicQueue), neither exclusive nor auto-delete: every
//     receiver naming the same subscription, on any connection, attaches to
//     it and competes for its messages, and it keeps what is published while
//     none is attached, until someone deletes it. With
//     ReceiverOptions.Ephemeral it is classic, exclusive to the connection,
//     auto-delete and not durable, so that it ends with the link (the
//     spec's terminus defaults); the subscription name then carries a suffix
//     of its own (the App adds one) so no other connection collides with it.
//
// On Artemis, a durable subscription attaches to the fully qualified name
// TOPIC::SUBSCRIPTION with the capabilities topic, shared and global,
// terminus durability unsettled-state, expiry-policy never and the link named
// SUBSCRIPTION: Artemis creates the multicast queue SUBSCRIPTION on the
// topic's address on the first attach (auto-create-queues) and consumes from
// it as from a queue afterwards, so closing a link never deletes it. Artemis
// deletes an auto-created queue that is empty and has no consumer unless
// auto-delete-queues is off for the address: turn it off (or create the queue
// in broker.xml) to keep what is published while every subscriber is down.
// An ephemeral one attaches to TOPIC with the topic capability: a private
// non-durable queue per link. Artemis routes by address only, so a receiver
// with binding keys other than "#" is refused before it attaches
// (address.CheckBindingKeys), as on Azure Service Bus.
//   - Raw addresses are never declared, nor are names in the broker's own
//     "amq." namespace (amq.topic and the like).
//
// A queue or exchange that already exists with other properties (say a queue
// an operator declared with x-max-length, or a fanout exchange) is used as it
// is, and so is one the user may not declare (no configure permission): a
// warning is logged and the attach decides. Only an ephemeral subscription
// queue of a topic must be declared as asked, and a partition queue must have
// its single active consumer: one that exists without it (409) fails the
// attach, naming the address, since it would hand one group to several
// replicas at once. Management.DeclareQueue and DeclareExchange
// themselves report such a conflict as a *ManagementError with status 409.
//
// RabbitMQ 4.0 ends the whole session, not just the link, when it refuses an
// attach (the error then reads "session ended by the broker: amqp:not-found:
// …"): every other link on that session ends with it. RabbitMQ 4.0 also
// sends the frames of that session's channel number to the dead session for a
// moment (rabbitmq-server#14317), and go-amqp reuses the number at once, so
// NewSession waits 100 ms after a session the broker ended before it begins
// the next one.
//
// A receiver with ReceiverOptions.Dynamic gets the reply node the broker's
// release has (Conn.ReplyNode, read from its open): direct reply-to on 4.2
// and later (a dynamic source with capability rabbitmq:volatile-queue, no
// queue at all), a temporary-queue dynamic source on 4.1, and on 4.0, which
// has no dynamic nodes, a private reply queue instead: named
// "amqpactor.reply." plus a random suffix, classic, exclusive, auto-delete,
// not durable; Receiver.Address reports its /queues/ address.
// Features().DynamicSource is false for this dialect, since a transport user
// cannot count on a dynamic node on every release. No dialect reports
// transactions: go-amqp v1.7 has no coordinator link, and Conn does not
// implement transport.Transactional.
//
// On Artemis, which ignores ?exclusive=true on an AMQP address, the partition
// queues of a Partitioned address are created exclusive through the broker's
// management address (ArtemisManagement, activemq.management) before a link
// first reaches one.
//
// # go-amqp pitfalls guarded here
//
//   - Credit above the link's buffer could hang a receiver in old go-amqp
//     (go-amqp issue 227). IssueCredit never lets the credit outstanding
//     (granted but not yet returned by Receive) exceed
//     ReceiverOptions.Credit when that is set; a grant that would is
//     refused with ErrCreditWindow.
//   - go-amqp may send a flow frame for a link it has already detached
//     (go-amqp issue 367), which RabbitMQ answers by ending the whole
//     session. Receiver.Close first refuses further IssueCredit, then
//     drains the link's credit (bounded to one second) so no credit is
//     pending when the detach goes out.
//   - Closing a link, session or connection can hang when the peer never
//     answers (go-amqp issue 310). Every Close here runs under a deadline:
//     the caller's, or DefaultCloseTimeout when the caller's context has
//     none. Conn.Close shuts the socket itself when the deadline passes.
package amqpwire
