// Package actors holds what every actor of the tree shares: the environment
// an App hands down (logger, goroutine accounting, backoff) and small helpers.
// The actors themselves live in the sub-packages, one per kind of node.
//
// # Where a message goes
//
// The actors own the life of connections, sessions and links: attaching,
// re-attaching with backoff, draining, supervision. A published message and
// a reply do not pass through their mailboxes once the link is up, because
// each mailbox hand-over is a goroutine to wake on the path of every
// message; a delivery and its disposition do, in batches, so that a hop is
// paid once per batch rather than once per message:
//
//   - publish: App.Publish puts the Publish on the sender's Lane (found in
//     the publishers' table, session.Senders), the queue of the attached
//     link's writer goroutine; the writer sends, a confirmer goroutine
//     awaits the outcome and answers the caller. With no link attached (or
//     no dedicated sender for the address) the Publish goes to the
//     publisher, which routes it: to the address's sender, which keeps it
//     until the next link, to the anonymous sender, or to a new sender
//     (package session says which, and how senders retire).
//   - receive: the receiver's pump goroutine takes each transfer, with what
//     else the link has prefetched, and sends them to the dispatcher actor
//     in one message; the dispatcher sends each partition actor its share
//     by group-id; the partition queues it for its worker goroutine (started
//     when work comes, gone when idle), which runs the handler and sends the
//     outcomes back to the receiver actor as one disposition message; the
//     receiver queues them for its settler goroutine, which sends the
//     dispositions and re-grants credit. A new link gets a new inflight; a
//     disposition for an ended link is dropped. The App's mailboxes
//     (mailbox.go) allocate nothing per post, so these hops cost no garbage.
//   - request/reply: while the reply link is attached, App.Request registers
//     in the requests actor's book (session.Replies) and the reply pump
//     hands each reply straight to its caller.
//
// # State changes
//
// An actor never assigns its node's state: it calls Env.SetState with its
// Node (its path as App.Tree names it, kind and address), which reports the
// change to Env.OnState without blocking. The App queues it and hands it to
// the EventStream and WithStateChanges from a goroutine of its own. Every
// node reports protocol.StateStopped when its actor stops.
//
// docs/ARCHITECTURE.md draws the tree and these paths ("Where a published
// message goes", "Where a delivery goes"), says which goroutine owns what and
// what a restart does at each level.
package actors
