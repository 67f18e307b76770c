// Package publish is the data plane of one sender link: the way a published
// message goes from its caller to the broker, and the broker's outcome back
// to the caller, without crossing a mailbox while the link is up. The
// sender actor (actors/sender) attaches and detaches the link; for every
// link generation it starts a Link here (Start) and stops it when the link
// ends (Stop), or lets it finish what it was handed (Finish) when it
// drains, retires or hands off. Nothing here sends an actor message: what a
// dead link gives back goes to the function the actor passes
// (Config.Ended).
//
// A published message flows:
//
//  1. Its caller (through the publishers' table) or the publisher actor
//     offers it on the sender's Lane (Lane.Offer), which puts it straight
//     on the writer's queue while a Link is started. Otherwise the
//     publisher parks it on the Lane (Lane.Park) and wakes the sender,
//     which takes it (Lane.TakeParked) and keeps it in its Waiting until
//     the next Start.
//  2. The writer sends it on the transport link, in order, without waiting
//     for its outcome, and queues its receipt for the confirmer; an outcome
//     known at once (in-process) is answered by the writer.
//  3. The confirmer waits for the outcomes in send order and answers each
//     publisher (protocol.Publish.Answer).
//  4. When the link dies, the writer hands back what it did not write, and
//     the confirmer what was written but never confirmed (an Ended each).
//     The sender keeps them in its Waiting, the unconfirmed first, and the
//     next Start queues them before anything else.
//
// Who owns what:
//
//   - the sender actor (its Receive): Start, Push, Stop, Finish, the Waiting,
//     Lane.Close and Lane.TakeParked;
//   - the writer goroutine: the transport link's Send, and each publish from
//     the Take that returned it until it is answered or queued for the
//     confirmer;
//   - the confirmer goroutine: the receipts, and the answer of every publish
//     the writer queued for it;
//   - the publisher actor: Lane.Park, and Lane.Shut once the sender has
//     stopped (it routes what was parked anew);
//   - any goroutine: Lane.Offer, the Counts.
package publish
