package transport

import "github.com/Azure/go-amqp"

// Recycler is implemented by a Receiver that can reuse the memory of the
// messages it delivered (the in-process broker's copies). RecycleSettled,
// called before the first Receive, is the caller's promise that once it has
// settled a message it neither reads it nor keeps anything pointing into it
// (its data sections above all); the receiver may then reuse that memory for
// a later delivery. Without the call a settled message stays the caller's.
type Recycler interface {
	RecycleSettled()
}

// Prefetcher is implemented by a Receiver that can say, without waiting,
// whether a transfer has arrived already: Prefetched returns it as Receive
// would, or nil. A caller uses it to take in one go what came in a burst.
type Prefetcher interface {
	Prefetched() *amqp.Message
}
