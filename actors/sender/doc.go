// Package sender is the actor of one sender link: to one address (a
// dedicated sender), or to the anonymous terminus (Config.Address zero),
// where each publish names its own address and a node the broker cannot
// route to fails that publish only. The actor keeps the link's life: it
// attaches on first publish, re-attaches after a backoff, retires, hands
// off, drains and describes itself. What a publish meets on an attached
// link is package internal/publish: for every link generation the actor
// starts a publish.Link, whose writer goroutine sends without waiting for
// outcomes and whose confirmer goroutine waits for them in order and
// answers each publisher. A publish still unsent when its link ends is sent
// again on the next link, and so is one already written whose outcome the
// dead link never brought (at-least-once: the copy keeps its message-id),
// unless its context has ended; the confirmer hands those back in send
// order, and they go out before anything that waited for the link.
//
// # Retirement
//
// A sender with Config.Idle set retires once nothing was published through
// it for that long (checked every Idle/4, so within 1.25 × Idle), and when
// its parent sends Retire. Retiring, it first tells its parent (Retiring),
// then closes its lane, lets the writer and the confirmer finish what was
// handed to them (outcomes awaited, bounded by the close timeout), detaches
// and tells its parent again (Retired); the parent then stops it. Every
// publish that reaches it after it began to retire, or that its link gave
// back, goes to its parent, which routes it anew: a publish racing a
// retirement is written exactly once (or, when the link dies under it,
// sent again like any other).
//
// # Restarts
//
// A sender fails on a panic, and when its link ends with publishes waiting
// (it then panics with the *transport.LinkError). Its parent's strategy
// restarts it, and the dying incarnation lets go of everything it owns on
// Restarting, as a retirement does: it closes its lane, hands the publishes
// waiting for a link back to its parent, which routes them again to the
// next incarnation (when its link ended, it keeps them for that incarnation
// instead, which re-attaches after a backoff), and lets the writer and the
// confirmer finish what was handed to them on the old link, which closes
// after them. Whatever they give back reaches the next incarnation, which
// sends it again. Restart, rather than stop and rebuild from the spec: the
// PID, the Lane and the parent's routing stay valid, and no publish is
// answered with an error. The next incarnation is a new struct (built by
// the props' producer) that starts from the session its predecessor had;
// link generations come from one counter per App (Env.Gen), so no report of
// a dead incarnation's goroutines is taken for the new link's.
// Node.Restarts counts the panics too ("panics" counter).
//
// # Stops
//
// A sender stopped while its publisher lives (its supervisor gave up on it,
// or the publisher is restarting) fails nothing: it hands what waits, and
// what is parked on its Lane, to the publisher, which routes it to a new
// sender, and lets its writer and confirmer finish on the old link, handing
// the publisher what that link never confirmed. Only a drained sender, or one
// whose publisher has stopped for good (Config.ParentGone), fails what waits
// with ErrStopped.
//
// # Link states
//
// The link's life is one linkState (state.go), which only linkState.on
// moves: detached, attaching, attached; refused (shown as detached) after
// the broker refused an attach; backoff (shown as restarting) while it
// waits to attach again; restarting, retiring, stopped. Its String is the
// node state the tree and the StateChanges show.
package sender
