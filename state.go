package amqpactor

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/internal/protocol"
)

// StateChange is one change of state of a node of the App's tree: the
// connection, a session (publisher, subscription, requests) or a link
// (sender, receiver). Every change is published on the App's actor system
// EventStream as a *StateChange and handed to the function of
// WithStateChanges and to every App.WatchStateChanges.
//
// The states are "attaching", "attached", "detached", "restarting",
// "failed", "retiring" (a sender about to retire) and, last of all,
// "stopped" (the node's actor has stopped: the App stopped, or the node
// left the tree). A link that re-attaches goes attached → detached or
// restarting → attaching → attached; a lost connection does the same on the
// connection and on every session and link under it.
type StateChange struct {
	// Path names the node as App.Tree does: the names of the nodes from the
	// root, joined by "/", e.g. "connection/publisher/sender:orders" or
	// "connection/subscription:orders/receiver". Paths are the App's own:
	// Apps that share an actor system (WithActorSystem) share its
	// EventStream too, and use WithStateChanges to tell theirs apart.
	Path string
	// Kind is the node's kind (connection, publisher, subscription,
	// requests, sender, receiver), Address its address, if it has one.
	Kind, Address string
	// From and To are the states before and after the change; From is
	// empty for a node's first state.
	From, To string
	// Err is why, when the change has a cause (a lost link, a refused
	// attach); nil otherwise.
	Err error
	// At is when the node changed.
	At time.Time
}

// stateChangeQueue bounds the state changes that wait to be delivered. They
// are delivered, in the order they happened, by one goroutine per App,
// never by an actor: so a slow callback or EventStream subscriber delays
// only the changes after it. When that many are waiting, further changes
// are dropped (and counted: App.DroppedStateChanges) rather than block the
// actor that reports them.
const stateChangeQueue = 4096

// WithStateChanges hands every state change of the App's tree to fn, in
// the order the changes happened (see StateChange). fn runs on one
// goroutine of the App, never on an actor's; it may be slow, but while it
// runs the changes after it wait (up to 4096 of them).
func WithStateChanges(fn func(StateChange)) Option {
	return func(c *appConfig) { c.onState = fn }
}

// WatchStateChanges calls fn with every state change from now on, like
// WithStateChanges, until the returned function is called; it may be called
// before Start. fn must not block: it runs on the goroutine that delivers
// every change of the App. The debug handler uses it for /events.
func (a *App) WatchStateChanges(fn func(StateChange)) (stop func()) {
	if fn == nil {
		return func() {}
	}
	a.watchMu.Lock()
	defer a.watchMu.Unlock()
	if a.watchers == nil {
		a.watchers = map[uint64]func(StateChange){}
	}
	a.watchSeq++
	id := a.watchSeq
	a.watchers[id] = fn
	return func() {
		a.watchMu.Lock()
		delete(a.watchers, id)
		a.watchMu.Unlock()
	}
}

// DroppedStateChanges counts the state changes dropped because
// 4096 of them were waiting to be delivered.
func (a *App) DroppedStateChanges() uint64 { return a.stateDropped.Load() }

// stateEvents delivers an App's state changes: actors put them on ch (never
// blocking), one goroutine takes them off, in order, and hands them on.
type stateEvents struct {
	ch      chan protocol.StateChange
	dropped *atomic.Uint64
	quit    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// startStateEvents starts the delivery of the state changes of an App
// running on sys; its put is what the actors report them to (Env.OnState).
func (a *App) startStateEvents(sys *actor.ActorSystem) *stateEvents {
	e := &stateEvents{
		ch:      make(chan protocol.StateChange, stateChangeQueue),
		dropped: &a.stateDropped,
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	deliver := func(m protocol.StateChange) {
		sc := StateChange(m)
		sys.EventStream.Publish(&sc)
		if fn := a.cfg.onState; fn != nil {
			fn(sc)
		}
		a.watchMu.Lock()
		fns := make([]func(StateChange), 0, len(a.watchers))
		for _, fn := range a.watchers {
			fns = append(fns, fn)
		}
		a.watchMu.Unlock()
		for _, fn := range fns {
			fn(sc)
		}
	}
	go func() {
		defer close(e.done)
		for {
			select {
			case m := <-e.ch:
				deliver(m)
			case <-e.quit:
				// What was reported before the quit is still delivered:
				// the stopped of every node comes before it.
				for {
					select {
					case m := <-e.ch:
						deliver(m)
					default:
						return
					}
				}
			}
		}
	}()
	return e
}

// put queues a change, or drops and counts it when the queue is full. It
// never blocks: actors call it from Receive.
func (e *stateEvents) put(m protocol.StateChange) {
	select {
	case e.ch <- m:
	default:
		e.dropped.Add(1)
	}
}

// stop delivers what is queued and ends the delivery goroutine, waiting for
// it up to ctx.
func (e *stateEvents) stop(ctx context.Context) error {
	e.once.Do(func() { close(e.quit) })
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
