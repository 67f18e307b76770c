// Package amqp091 is the second implementation of the transport seam:
// RabbitMQ over AMQP 0-9-1, with github.com/rabbitmq/amqp091-go on the
// wire. amqpactor.Dial091 returns its Connector; the same App, handlers,
// options and actor tree run on it as on amqpwire (AMQP 1.0).
//
// # Connections and channels
//
// Config is the type amqpwire.Config is (both alias the one in
// transport/internal/endpoint, with the URL parsing, SASL choice, redaction
// and connect errors both transports share), so every DialOption means the
// same: the URL
// (the userinfo ends at the last '@'; the path is the virtual host), TLS
// (verified by default), SASL from the URL (PLAIN), ANONYMOUS or EXTERNAL,
// the refusal of PLAIN in clear text to a remote host, the container id
// (sent as the connection name, which RabbitMQ shows), the logger, and no
// password in any error, log line or String. IdleTimeout sets the
// heartbeat to two thirds of it, in whole seconds (30 s without one):
// amqp091-go declares a broker silent for one and a half heartbeats gone,
// so a silent broker is given up on after about IdleTimeout.
//
// The socket goes through the write coalescer both transports share
// (transport/internal/coalesce, without amqpwire's folding of dispositions):
// amqp091-go flushes every frame with its own system call, and under load
// the frames of a burst share one instead. amqp091-go reads it through an
// inbound guard (guard.go; TLS is done below the guard, by the connector,
// so the guard reads plain frames): see Consuming.
//
// A transport.Session is one channel. The actors already give every
// subscription a session of its own, the publisher one for all its senders,
// and requests and transactions theirs, so each owns its channel. A channel
// the broker closes fails what runs on it with a *amqp.SessionError (the
// broker's reply code, as an AMQP 1.0 condition, in RemoteErr), which the
// actors treat as a lost session: they open a new one with backoff. A
// closed connection is a *amqp.ConnError the same way. A consumer the
// broker cancels (its queue deleted) ends its link only (*amqp.LinkError,
// amqp:resource-deleted). Nothing of amqp091-go's own recovery is used.
//
// # Addresses
//
// Addresses are validated as RabbitMQ 4 spells them over AMQP 1.0, and
// declared before use, each on a channel of its own (a refused declaration
// closes its channel in 0-9-1, never one in use):
//
//   - Queue(name): a durable quorum queue (classic with WithClassicQueue),
//     published to through the default exchange with the queue's name as
//     routing key; dead-letter and further queue arguments as on amqpwire.
//   - Topic(name): a durable topic exchange, published to with each
//     message's subject as the routing key (at most 255 bytes); a
//     subscription consumes from its own exclusive, auto-delete queue
//     NAME.SUBSCRIPTION bound with its binding keys ("#" by default).
//   - Raw("exchange/routing-key"): published as given, after checking
//     that the exchange exists (publishing to a missing one would close
//     the channel); RabbitMQ 4's "/queues/NAME" and "/exchanges/NAME/KEY"
//     forms and a name without '/' (a queue, a reply address) are
//     understood too. A raw source is a queue that must exist.
//   - Stream(name): not offered here; a publish, an attach and the
//     connector's CheckStream (asked by Subscribe) fail with an
//     *address.Error naming it. Streams are read over AMQP 1.0.
//
// # Publishing
//
// The publisher's channel is in confirm mode: each Send writes a mandatory
// basic.publish and returns a Receipt at once, so publishes pipeline and
// each waits for its own confirm: basic.ack is accepted, basic.nack
// rejected, and a basic.return (no queue took it) released with
// amqp:not-found and the reply code, which App.Publish returns as an
// *OutcomeError: an unroutable message is never dropped silently. A return
// carries no sequence number; it is matched to the earliest unconfirmed
// publish with the same exchange, routing key and message-id.
// Publishes still unconfirmed when the channel ends fail with its
// *amqp.SessionError, and the sender actor sends them again, with the same
// message-id, once its publisher has a new channel.
//
// # Consuming
//
// A receiver sets its channel's prefetch to its credit window with
// basic.qos (per consumer) and starts its consumer on the first
// IssueCredit; Receive hands out no more deliveries than credit has been
// granted, so a paused subscription receives nothing and a slow handler
// holds at most the window unacknowledged. A pre-settled (at-most-once)
// receiver has the same window and acknowledges each delivery as Receive
// hands it out, before its handler runs: automatic acknowledgement would
// let the broker push the whole queue into the client. Settle maps
// outcomes:
//
//	accepted                      basic.ack
//	rejected                      basic.nack requeue=false (dead-lettered or dropped)
//	released                      basic.nack requeue=true (delivery-count kept on 4.3+)
//	modified                      basic.reject requeue=true (delivery-count + 1)
//	modified{undeliverable-here}  basic.nack requeue=false, as RabbitMQ 4 does over AMQP 1.0
//
// A quorum queue counts a basic.reject with requeue in x-delivery-count on
// every RabbitMQ release, and from 4.3 on it no longer counts a basic.nack
// with requeue, so modified counts a delivery and released does not, as
// over AMQP 1.0. RabbitMQ 4.0 counts every return over 0-9-1, released
// ones too: there the difference cannot be made. What Close gives back
// after a drain goes back the same way (a modified one counted).
//
// Acknowledgements go out from a goroutine of the consumer's own, as one
// basic.ack with multiple=true for each run of settled delivery tags
// (acks.go), since RabbitMQ 4.0 can lose the last acknowledgements before a
// channel's close. Once the runtime stops taking deliveries (a drain), what
// it releases or modifies stays unacknowledged: a basic.nack then would
// have the broker hand it straight back to the same consumer, out of its
// place. Receiver.Close cancels the consumer (its acknowledgements are then
// safe) and the session's close gives back what it held; a partition's
// consumer (single active consumer) closes its channel at once instead, so
// that the next consumer cannot take what follows before what it held.
// Closing the channel gives back what it held, marked redelivered, each
// message in its place in the queue. Quorum queues count in
// x-delivery-count every message a closed channel gives back and the
// returns above (released ones on RabbitMQ 4.0 only), which is read as the
// delivery-count of a redelivery from a quorum queue this connection
// declared as one. Anywhere else the header is a
// publisher's: RabbitMQ 4.0 hands it on unchanged on a first delivery from
// a quorum queue, and on every delivery from a classic one, so there the
// delivery-count is 0 (a classic queue keeps no count), whatever the
// header says. FirstAcquirer is the inverse of the redelivered flag.
//
// A message over Config.MaxMessageSize arrives as a poison message
// (transport.Poison), which the runtime rejects alone; it has been read
// whole by then, as 0-9-1 has no way to refuse it earlier. So does a
// message whose content header amqp091-go would not read: amqp091-go fails
// the frame and closes the whole connection, so every delivery in flight
// would go back behind it, and it would come back first on the next
// connection until a quorum queue's delivery limit dropped it and those
// behind it. The inbound guard checks each content header before
// amqp091-go parses it: its headers table and the tables and arrays in it
// at most 8,192 entries each and nested at most 32 deep below the headers
// table (amqp091-go's own bounds, and the AMQP 1.0 scanner's), every field
// of a type amqp091-go reads and exactly filling its table or array, the
// properties around it complete, the header at most 128 KiB. One that
// fails goes on with its table replaced by a single header,
// transport.PoisonAnnotation, giving the reason (and its other properties
// kept where they parse); its body follows unchanged and is not read. The
// receiver hands such a delivery, or one a publisher marked so itself, on
// as a poison message, which the runtime rejects (basic.nack alone without
// requeue: dead-lettered where the queue has a dead-letter exchange),
// counts as poison and logs with the reason, without the payload. Nothing
// else on the connection is touched.
//
// # Request/reply and transactions
//
// A Dynamic receiver consumes RabbitMQ's direct reply-to
// (amq.rabbitmq.reply-to), no queue, with automatic acknowledgement; its
// Address is a token for this connection. Direct reply-to needs the request
// published on the channel that consumes the replies, so a Send whose
// reply-to is such a token is published on that channel, with reply-to
// amq.rabbitmq.reply-to, which the broker rewrites into the address the
// responder replies to. On RabbitMQ 4.0 only a 0-9-1 responder can reply
// there (direct reply-to is 0-9-1's), from 4.2 on a 1.0 responder can too;
// a 1.0 requester's reply queue takes replies from either protocol.
// Crossing protocols, RabbitMQ 4.0 hands reply-to over as it is; 4.2 and
// later read a 0-9-1 reply-to as a queue name and a 1.0 one as an address
// and convert between the two ("/queues/q" reaches 0-9-1 as "q").
//
// Conn implements transport.Transactional. A Txn keeps its publishes (at
// most 65,536 and 64 MiB of bodies) until Commit, which sends them and
// tx.commit together on a channel it opens in tx.select mode; Rollback
// sends nothing. They are not mandatory: a return in a transaction would
// have nobody to go to. Txn.Accept (amqpactor's Tx.Accept) binds the
// transaction to the channel of the delivery it accepts, since in 0-9-1 a
// transaction is a channel's and only the channel a message came on can
// acknowledge it: Commit then sends the publishes, a basic.ack per
// accepted delivery and tx.commit on that channel, with nothing else sent
// in between, so a transaction accepts the deliveries of one subscription
// link only. The first such commit puts the subscription's channel in
// tx.select mode for good, and from then on its acknowledgements are
// committed after each batch (one tx.commit round trip per batch). A
// commit that fails closes the channel: the broker rolls the transaction
// back and gives every delivery back, redelivered.
//
// # Message mapping
//
// No envelope: the body goes as it is, and the AMQP 1.0 fields the runtime
// uses map onto 0-9-1 properties, as RabbitMQ 4 itself converts between
// the protocols where it does:
//
//	AMQP 1.0 (amqpactor.Message)  AMQP 0-9-1
//	body (one or more data)        body (an amqp-value body is refused at Publish)
//	message-id, correlation-id     message-id, correlation-id; a ulong, uuid or binary id
//	                               in text, its type in header x-amqp-1.0-message-id-type
//	                               (x-amqp-1.0-correlation-id-type)
//	content-type, content-encoding content-type, content-encoding
//	reply-to                       reply-to
//	subject                        type
//	user-id                        user-id (RabbitMQ checks it against the user)
//	group-id                       app-id (RabbitMQ 4's own conversion)
//	creation-time                  timestamp (seconds); milliseconds in header x-amqp-1.0-creation-time
//	to, reply-to-group-id,         headers x-amqp-1.0-to, x-amqp-1.0-reply-to-group-id,
//	group-sequence,                x-amqp-1.0-group-sequence,
//	absolute-expiry-time           x-amqp-1.0-absolute-expiry-time (milliseconds)
//	header durable                 delivery-mode 2; 1 only for a header that says durable=false (Transient)
//	header priority                priority (0 read back as 1.0's default, 4)
//	header ttl                     expiration (milliseconds)
//	header delivery-count          x-delivery-count, from a quorum queue on a redelivery only
//	                               (the broker's own count there); 0 otherwise
//	header first-acquirer          not redelivered
//	application-properties         headers
//	message-annotations "x-..."    headers "x-..." (read back as annotations)
//
// A header value a 0-9-1 field table cannot hold is refused at Publish
// (a uint64 beyond int64); uint and uint64 go as int64, a UUID or symbol as
// a string, a time to the second. Headers whose name starts with "x-" are
// read back as annotations, as RabbitMQ hands them to an AMQP 1.0 reader.
// Crossing to an AMQP 1.0 reader through RabbitMQ 4, everything above but
// the subject (RabbitMQ gives type as the annotation x-basic-type) and the
// x-amqp-1.0-* headers (annotations there) arrives as it was sent; from an
// AMQP 1.0 publisher RabbitMQ drops subject, to, group-sequence,
// reply-to-group-id and absolute-expiry-time, and a binary header arrives
// as a string.
package amqp091
