package amqpactor

import (
	"context"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
)

// Props returns the props of an actor that owns the App: spawned under a
// user's actor (ctx.Spawn(app.Props())), it starts the App on the system it
// runs on and becomes the root of the App's tree there (the connection
// actor is its child), so the parent's supervisor sees the App's failures,
// and stopping it (or its parent) stops the App.
//
// The App must run on that actor system: give it WithActorSystem with the
// same system, or none (the App then takes the spawning one). Its Receive
// never blocks on the broker: Start's waiting runs on a goroutine that
// reports back with a message.
//
// The actor fails by panicking with an error, which protoactor hands to the
// parent's supervisor strategy as the failure's reason, when:
//   - Start fails (a refused connection or attach): the error is Start's;
//   - the connection goes "failed" (it gave up reconnecting): the error
//     wraps the connection's last error;
//   - a subscription goes "failed" (it gave up re-attaching, or its
//     supervisor gave up on it after repeated failures);
//   - the connection actor (its child) stops while the App runs;
//   - the App was already started or stopped when the actor started (an App
//     starts once), or runs on another actor system.
//
// On *actor.Stopping (and on *actor.Restarting: an App cannot start again,
// so a restarted actor fails at once, and the strategy should stop it) it
// stops the App. That Stop blocks the actor's Receive, as protoactor's
// cleanup does, bounded by WithCloseTimeout (5 s by default): the actor's
// children, the App's tree, stop after it, once drained.
func (a *App) Props() *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &appActor{app: a} })
}

// appActor is the actor of App.Props.
type appActor struct {
	app       *App
	stopWatch func()
}

// appStartResult is what the goroutine running the waiting part of Start
// reports to the appActor.
type appStartResult struct{ err error }

// appConnFailed tells the appActor that the connection went "failed".
type appConnFailed struct{ err error }

// appSubFailed tells the appActor that a subscription went "failed": it
// gave up re-attaching, or its supervisor gave up on it.
type appSubFailed struct {
	path string
	err  error
}

func (p *appActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.start(ctx)
	case *appStartResult:
		if m.err != nil {
			panic(fmt.Errorf("amqpactor: App.Props: %w", m.err))
		}
	case *appConnFailed:
		panic(fmt.Errorf("amqpactor: App.Props: the connection failed: %w", m.err))
	case *appSubFailed:
		panic(fmt.Errorf("amqpactor: App.Props: %s failed: %w", m.path, m.err))
	case *actor.Terminated:
		// The only child is the connection actor: gone while the App is
		// not stopping (its restarts ran out, or someone stopped it), the
		// App has no tree left.
		if !p.app.stopped() {
			panic(fmt.Errorf("amqpactor: App.Props: the connection actor %s stopped while the App runs", m.Who))
		}
	case *actor.Stopping, *actor.Restarting:
		p.stop()
	}
}

func (p *appActor) start(ctx actor.Context) {
	sys, self := ctx.ActorSystem(), ctx.Self()
	p.stopWatch = p.app.WatchStateChanges(func(c StateChange) {
		switch {
		case c.Kind == "connection" && c.To == actors.StateFailed:
			sys.Root.Send(self, &appConnFailed{err: c.Err})
		case c.Kind == "subscription" && c.To == actors.StateFailed:
			sys.Root.Send(self, &appSubFailed{path: c.Path, err: c.Err})
		}
	})
	finish, err := p.app.begin(context.Background(), sys, ctx)
	if err != nil {
		p.stopWatch()
		p.stopWatch = nil
		panic(fmt.Errorf("amqpactor: App.Props: %w", err))
	}
	go func() {
		sys.Root.Send(self, &appStartResult{err: finish()})
	}()
}

func (p *appActor) stop() {
	if p.stopWatch != nil {
		p.stopWatch()
		p.stopWatch = nil
	}
	// No deadline: Stop is bounded by WithCloseTimeout.
	_ = p.app.Stop(context.Background())
}

// stopped reports whether the App is stopped (or stopping).
func (a *App) stopped() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state == stateStopped
}
