// Package deliver is the data plane of one receiver link: the path a
// delivered message takes from the link to a handler, and its settle back
// to the link. The receiver actor (actors/receiver) owns the link's life;
// once per link it makes a Link (New), hands it its Owner (Start), and ends
// it (End, Close, Cut). Nothing here is an actor: what a Link has to tell
// the receiver goes through its Owner, which the actor turns into messages
// to itself.
//
// Four kinds of goroutine touch a Link, each with its own part of it
// (written on the fields):
//
//   - the pump blocks in the link's Receive, turns each transfer into a
//     protocol.Delivery, notes it as held and hands the batch it has at hand
//     to Owner.Dispatch (to the dispatcher actor, then to a partition);
//   - the handler goroutines (the partitions' workers) give each verdict to
//     Delivery.To, the Owner's protocol.Settler, which sends it to the actor;
//   - the actor calls Settle with those verdicts, in order, and Pause,
//     Resume, StopPump, Close, Cut, Cancel and End as the link's life goes on;
//   - the settler takes what Settle queued, sends the dispositions in order
//     and grants credit only for deliveries whose disposition is on the
//     wire, and only what the App's byte budget has room for; it closes the
//     link when Close or Cut asks.
//
// A transaction on any goroutine finds a held delivery (Find) and claims it,
// so that its handler's settle returns only credit.
//
// When the link ends the settle queue closes: a late verdict is dropped
// rather than settling someone else's delivery on a new link, and the
// broker has the delivery back.
package deliver
