package amqpactor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/connection"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
)

// Delivery is what ActorHandler sends its actor for each delivery, as a
// request: the actor answers it with ctx.Respond(Done(err)).
type Delivery struct {
	Message *Message
	// Address is the subscription's address.
	Address Address
	// Partition is the index of the partition that runs the delivery
	// (WithPartitions): deliveries of one group-id come from one partition,
	// in order.
	Partition int
}

// DeliveryDone is an actor's answer to a *Delivery; Done makes it.
type DeliveryDone struct {
	Err error
}

// Done is the answer of an actor to a *Delivery: err decides the outcome as
// a Handler's return does (nil accepts; Reject, Release, Undeliverable; any
// other error modifies).
func Done(err error) *DeliveryDone { return &DeliveryDone{Err: err} }

// DefaultActorTimeout bounds how long ActorHandler waits for its actor's
// answer when the handler's context has no deadline.
const DefaultActorTimeout = 30 * time.Second

var errNilActor = errors.New("amqpactor: ActorHandler(nil): no actor to handle messages")

// ActorHandler returns a Handler that sends each delivery to the actor pid
// as a *Delivery request and waits for its answer, Done(err): err decides
// the outcome exactly as a Handler's return does.
//
// The actor must answer every Delivery with ctx.Respond(Done(err)). No
// answer by the handler's deadline (WithHandlerTimeout, the subscription's
// bound on each call, or DefaultActorTimeout when there is none), or an actor that is gone, is a failure: the delivery
// is modified and the broker redelivers it. An answer that comes later is dropped. The partition waits for the
// answer before it hands the actor the next delivery, so the order of a
// group-id holds; an actor that blocks in its Receive blocks the partition.
//
// pid must be an actor of the App's actor system (WithActorSystem).
// ActorHandler(nil) returns a handler that Subscribe refuses with an error;
// called anyway, it rejects every message.
func ActorHandler(pid *actor.PID) Handler {
	if pid == nil {
		return invalidAdapter(errNilActor)
	}
	h := func(ctx context.Context, m *Message) error {
		app := appFrom(ctx)
		if app == nil {
			return errors.New("amqpactor: ActorHandler used outside a subscription of an App")
		}
		sys := app.actorSystem()
		if sys == nil {
			return ErrStopped
		}
		timeout := DefaultActorTimeout
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
			if timeout <= 0 {
				return fmt.Errorf("amqpactor: actor %s: %w", pid, context.DeadlineExceeded)
			}
		}
		// A copy: the actor may read it after the wait below gave up, when
		// a retry in place (Backoff) is already counting in m.
		// Tx.Accept finds the delivery from the copy while the wait lasts.
		mc := *m
		d := &Delivery{Message: &mc}
		app.actorCopies.Store(&mc, m)
		defer app.actorCopies.Delete(&mc)
		if p := protocol.PartitionFrom(ctx); p != nil {
			d.Address, d.Partition = p.Address, p.Index
		}
		res, err := ask(ctx, sys, pid, d, timeout)
		if r, ok := res.(*DeliveryDone); ok && r != nil && err == nil {
			return r.Err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("amqpactor: actor %s did not answer the delivery before its handler's context ended: %w", pid, ctx.Err())
		}
		if err != nil {
			return fmt.Errorf("amqpactor: actor %s did not answer the delivery: %w", pid, err)
		}
		if r, ok := res.(*DeliveryDone); ok && r != nil {
			return r.Err
		}
		return fmt.Errorf("amqpactor: actor %s answered a delivery with %T, not Done", pid, res)
	}
	return withDescriptor(h, handlerInfo{kind: kindActor})
}

// answer is where an actor's answer to one delivery goes. A protoactor
// Future was used, but an answer after its timeout (an actor busy when its
// link detached) writes the result unlocked while the waiter reads it; a
// channel of one slot drops a late answer instead.
type answer struct{ ch chan any }

func (a *answer) SendUserMessage(_ *actor.PID, m any) {
	_, msg, _ := actor.UnwrapEnvelope(m)
	select {
	case a.ch <- msg:
	default:
	}
}

func (*answer) SendSystemMessage(*actor.PID, any) {}
func (*answer) Stop(*actor.PID)                   {}

// ask sends d to pid and waits for its answer until timeout or ctx's end
// (a cancelled handler context, Stop past its graceful part, ends it at
// once): (nil, nil) when ctx ended first.
func ask(ctx context.Context, sys *actor.ActorSystem, pid *actor.PID, d *Delivery, timeout time.Duration) (any, error) {
	a := &answer{ch: make(chan any, 1)}
	self, _ := sys.ProcessRegistry.Add(a, "actorhandler$"+sys.ProcessRegistry.NextId())
	defer sys.ProcessRegistry.Remove(self)
	sys.Root.RequestWithCustomSender(pid, d, self)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case res := <-a.ch:
		if _, dead := res.(*actor.DeadLetterResponse); dead {
			return nil, actor.ErrDeadLetter
		}
		return res, nil
	case <-t.C:
		return nil, actor.ErrTimeout
	case <-ctx.Done():
		return nil, nil
	}
}

// actorSystem is the system the App's actors run on: its own once started,
// or the one WithActorSystem gave it.
func (a *App) actorSystem() *actor.ActorSystem {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sys != nil {
		return a.sys
	}
	return a.cfg.system
}

// PublishRequest asks the App.Publisher actor to publish Message to
// Address; it answers a *PublishResult.
type PublishRequest struct {
	Address Address
	Message *Message
}

// PublishResult answers a PublishRequest once the broker has settled the
// message: Err is what Publish would have returned.
type PublishResult struct {
	Err error
}

// maxActorPublishes bounds the publishes the Publisher actor has in flight;
// more requests wait their turn (its Receive never blocks).
const maxActorPublishes = 256

// Publisher returns the PID of the App's publisher actor: send it a
// *PublishRequest with ctx.Request (or RequestFuture) and it answers the
// sender a *PublishResult once the broker has settled the message. Its
// Receive never blocks: the publish runs on a goroutine of its own (at most
// 256 at once; more wait their turn), so a requesting actor goes on with its
// own messages meanwhile.
//
// Once the App has started, the actor is in its tree: a child of the
// connection actor (App.Tree draws it, kind "actor-publisher", with its
// counters), its failures decided by the App's strategy; one its supervisor
// stops is started again within a restart budget, past which Health names
// it (requests are then still published, by the PID's own process). The
// PID stays the same throughout: it forwards to the actor in the tree.
//
// Requests before Start are answered ErrNotStarted, those made while Start
// runs wait for it. Before Start the PID answers on the system given by
// WithActorSystem; an App with a system of its own has none until Start, and
// Publisher returns nil then. It stops with the App: after Stop, Publisher
// returns nil and requests to the old PID are dead letters. A nil Message or
// a zero Address is answered with an error.
func (a *App) Publisher() *actor.PID {
	a.mu.Lock()
	if a.pub != nil {
		defer a.mu.Unlock()
		return a.pub.pid
	}
	sys := a.sys
	if sys == nil {
		sys = a.cfg.system
	}
	if sys == nil || a.state == stateStopped {
		a.mu.Unlock()
		return nil
	}
	p := &actorPublisher{app: a, sys: sys}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.pid, _ = sys.ProcessRegistry.Add(&publisherFront{p: p}, "amqpactor-publisher$"+sys.ProcessRegistry.NextId())
	a.pub = p
	started := a.state == stateStarted
	root, env := a.root, a.env
	a.mu.Unlock()
	if started {
		p.adopt(env, root)
	}
	return p.pid
}

// actorPublisher is the Publisher: the PID App.Publisher returns (its
// front), the actor in the tree it forwards to, and the goroutines that run
// the publishes of both.
type actorPublisher struct {
	app    *App
	sys    *actor.ActorSystem
	pid    *actor.PID      // the front's: what Publisher returns
	ctx    context.Context // publishes' context: ends when the App's stop gives up on them
	cancel context.CancelFunc

	// target is the actor in the tree, once spawned: written by the
	// connection actor's goroutine (Adopt), read by any sender's.
	target atomic.Pointer[actor.PID]
	// started counts the incarnations of the actor in the tree (restarts
	// and starts again), published and failed the publishes answered.
	started, published, failed atomic.Uint64

	mu      sync.Mutex
	running int
	pending []pubJob
	wg      sync.WaitGroup
}

type pubJob struct {
	to  *actor.PID
	req *PublishRequest
}

// actorPublisherName names the Publisher's actor in the tree, and its kind.
const actorPublisherName = "actor-publisher"

// adopt asks the connection actor under root to spawn the Publisher's
// actor; until it has, the front runs the requests itself.
func (p *actorPublisher) adopt(env *actors.Env, root *actor.PID) {
	if root == nil || env == nil {
		return
	}
	p.sys.Root.Send(root, &connection.Adopt{
		Name: actorPublisherName,
		Props: func() *actor.Props {
			return env.Props(func() actor.Actor { return &publisherActor{p: p} })
		},
		Adopted: func(pid *actor.PID, err error) {
			if err == nil {
				p.target.Store(pid)
			}
		},
	})
}

// publisherFront is the process of the PID App.Publisher returns: it hands
// what it is sent to the actor in the tree, and takes a request itself
// while that actor is not there (before Start, or between its end and its
// start again), so none waits for an actor that is gone. It runs on the
// sender's goroutine and never blocks.
type publisherFront struct{ p *actorPublisher }

func (f *publisherFront) SendUserMessage(_ *actor.PID, m any) {
	if t := f.p.target.Load(); t != nil {
		if proc, ok := f.p.sys.ProcessRegistry.Get(t); ok {
			proc.SendUserMessage(t, m)
			return
		}
	}
	_, msg, sender := actor.UnwrapEnvelope(m)
	if req, ok := msg.(*PublishRequest); ok {
		f.p.take(sender, req)
	}
}

func (f *publisherFront) SendSystemMessage(_ *actor.PID, m any) {
	if t := f.p.target.Load(); t != nil {
		if proc, ok := f.p.sys.ProcessRegistry.Get(t); ok {
			proc.SendSystemMessage(t, m)
		}
	}
}

func (f *publisherFront) Stop(*actor.PID) {
	if t := f.p.target.Load(); t != nil {
		if proc, ok := f.p.sys.ProcessRegistry.Get(t); ok {
			proc.Stop(t)
		}
	}
}

// publisherActor is the Publisher's actor in the tree. draining is its
// own: set once its tree drains, after which it takes no request.
type publisherActor struct {
	p        *actorPublisher
	draining bool
}

func (a *publisherActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.p.started.Add(1)
	case *PublishRequest:
		if a.draining {
			a.p.answer(ctx.Sender(), fmt.Errorf("amqpactor: Publisher: %w", ErrStopped))
			return
		}
		a.p.take(ctx.Sender(), m)
	case *protocol.Describe:
		ctx.Respond(a.describe(ctx))
	case *protocol.Drain:
		// The publishes in flight end with the publisher's drain, which
		// follows, and the App's Stop waits for them.
		a.draining = true
		select {
		case m.Done <- nil:
		default:
		}
	case *testhook.Crash:
		panic("amqpactor: " + actorPublisherName + ": " + m.Reason)
	}
}

func (a *publisherActor) describe(ctx actor.Context) *protocol.Described {
	p := a.p
	p.mu.Lock()
	running, pending := p.running, len(p.pending)
	p.mu.Unlock()
	state := protocol.StateAttached
	if a.draining {
		state = protocol.StateDetached
	}
	n := &protocol.Node{Name: actorPublisherName, Kind: actorPublisherName, PID: ctx.Self().String(), State: state,
		Restarts: int(max(p.started.Load(), 1) - 1),
		Counters: map[string]uint64{"published": p.published.Load(), "failed": p.failed.Load(),
			"in_flight": uint64(running), "pending": uint64(pending)}}
	return &protocol.Described{Node: n, Self: ctx.Self()}
}

// answer sends the result of a request to who asked (nobody when to is
// nil) and counts it.
func (p *actorPublisher) answer(to *actor.PID, err error) {
	if err != nil {
		p.failed.Add(1)
	} else {
		p.published.Add(1)
	}
	if to != nil {
		p.sys.Root.Send(to, &PublishResult{Err: err})
	}
}

// take checks req and runs it on a goroutine of the publisher's, or queues
// it when maxActorPublishes run. It never blocks.
func (p *actorPublisher) take(to *actor.PID, req *PublishRequest) {
	switch {
	case req == nil || req.Message == nil:
		p.answer(to, errNil("Publisher", "message"))
		return
	case req.Address.IsZero():
		p.answer(to, errors.New("amqpactor: Publisher: zero address"))
		return
	}
	j := pubJob{to: to, req: req}
	p.mu.Lock()
	if p.running >= maxActorPublishes {
		p.pending = append(p.pending, j)
		p.mu.Unlock()
		return
	}
	p.running++
	p.wg.Add(1)
	p.mu.Unlock()
	go p.run(j)
}

// run publishes j, then what waits its turn, until nothing does.
func (p *actorPublisher) run(j pubJob) {
	defer p.wg.Done()
	for {
		p.answer(j.to, p.app.Publish(p.ctx, j.req.Address, j.req.Message))
		p.mu.Lock()
		if len(p.pending) == 0 {
			p.running--
			p.mu.Unlock()
			return
		}
		j = p.pending[0]
		p.pending[0] = pubJob{}
		p.pending = p.pending[1:]
		p.mu.Unlock()
	}
}

// stopPublisher takes the Publisher's PID out of the registry, so no
// request is taken any more (its actor in the tree stops with the tree),
// and returns a function that waits, bounded by its context, for the
// publishes in flight to end (Stop ends them), then cancels what is left.
func (a *App) stopPublisher() func(context.Context) error {
	a.mu.Lock()
	p := a.pub
	a.pub = nil
	a.mu.Unlock()
	if p == nil {
		return func(context.Context) error { return nil }
	}
	p.sys.ProcessRegistry.Remove(p.pid)
	return func(ctx context.Context) error {
		done := make(chan struct{})
		go func() { p.wg.Wait(); close(done) }()
		var err error
		select {
		case <-done:
		case <-ctx.Done():
			err = fmt.Errorf("amqpactor: stop: publishes of the Publisher actor: %w", ctx.Err())
		}
		p.cancel()
		<-done
		return err
	}
}
