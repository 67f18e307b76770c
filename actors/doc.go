// Package actors holds what every actor of an App's tree shares: the
// environment the App hands down (Env: logger, goroutine accounting with
// Env.Go, link generations with Env.Gen, backoff, the attach and close
// bounds, the byte budget, the links holding deliveries), the mailbox every
// actor gets from Env.Props (mailbox.go) and the Pool of goroutines that
// runs those mailboxes, the default supervisor strategy (Supervisor) and
// the wrapper of a user's (UserStrategy), and a parent's restart budget
// (Restarts). The actors themselves live in the sub-packages, one per kind
// of node.
//
// # Lifecycle here, messages elsewhere
//
// The actors own the life of connections, sessions and links: attaching,
// re-attaching with backoff, draining, supervising, describing. What moves
// the messages is the data plane, which an actor starts once per link
// generation and stops when the link ends:
//
//   - publish: the sender actor (package sender) starts a publish.Link of
//     package internal/publish for each link it attaches. Callers offer
//     publishes on the sender's publish.Lane, which the publishers' table
//     (session.Senders) finds by address, straight onto the link's writer
//     goroutine; a confirmer goroutine answers each caller. With no link
//     up, or no sender for the address, a publish goes to the publisher
//     actor, which routes it (package session).
//   - deliver and settle: the receiver actor (package receiver) makes a
//     deliver.Link of package internal/deliver for each link it attaches.
//     Its pump goroutine sends what the link delivers to the dispatcher
//     actor in batches; the dispatcher sends each partition actor its share
//     by group-id; a partition's worker goroutine runs the handler and
//     sends the outcomes back to the receiver actor, which hands them to
//     the link's settler goroutine for the dispositions and credit. A
//     settle for a link that has ended is dropped. These hops are actor
//     messages, in batches, and the mailbox allocates nothing per post.
//   - request/reply: while the reply link is attached, App.Request
//     registers in the requests actor's book (session.Replies) and the
//     reply pump hands each reply straight to its caller.
//
// # State changes
//
// An actor never assigns its node's state: it calls Env.SetState with its
// Node (its path as App.Tree names it, kind and address), which reports the
// change to Env.OnState without blocking. The App queues it and hands it to
// the EventStream and WithStateChanges from a goroutine of its own. The
// connection, session, sender and receiver nodes report their states, and
// protocol.StateStopped when their actor stops; the dispatcher, partition
// and txn nodes report none.
//
// docs/ARCHITECTURE.md maps these paths ("The publish path", "The deliver
// path", "The settle path"), says which goroutine owns what, the lock
// order, and what a restart does at each level.
package actors
