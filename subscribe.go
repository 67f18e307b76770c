package amqpactor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/transport"
)

// Subscription is one handler on one address.
type Subscription struct {
	app    *App
	spec   *protocol.SubscriptionSpec
	paused bool     // guarded by app.mu: the last Pause or Resume
	info   *subInfo // what AsyncAPI reports of it (asyncapi.go)
	// parts are the subscriptions of a Partitioned address's queues, one
	// each; s itself then runs nothing and Close, Pause and Resume go to
	// them.
	parts []*Subscription
}

// Address is the address the subscription receives from.
func (s *Subscription) Address() Address {
	if s == nil {
		return Address{}
	}
	return s.spec.Address
}

// Name is the subscription's name in the tree.
func (s *Subscription) Name() string {
	if s == nil {
		return ""
	}
	return s.spec.Name
}

// Close detaches just this subscription: handlers in flight finish and
// settle (until ctx ends), then the link detaches; deliveries still unsettled
// go back to the broker.
func (s *Subscription) Close(ctx context.Context) error {
	if s == nil {
		return errNil("Subscription.Close", "subscription")
	}
	if ctx == nil {
		return errNil("Subscription.Close", "context")
	}
	if s.parts != nil {
		var errs []error
		for _, p := range s.parts {
			errs = append(errs, p.Close(ctx))
		}
		return errors.Join(errs...)
	}
	a := s.app
	if err := a.awaitStart(ctx); err != nil && !errors.Is(err, ErrStopped) && !errors.Is(err, ErrNotStarted) {
		return err
	}
	a.mu.Lock()
	for i, x := range a.subs {
		if x == s {
			a.subs = append(a.subs[:i], a.subs[i+1:]...)
			break
		}
	}
	root, started, env := a.root, a.state == stateStarted, a.env
	a.mu.Unlock()
	if !started {
		return nil
	}
	hard, grace, cancel := stopBounds(ctx, a.cfg.closeTimeout)
	defer cancel()
	done := make(chan error, 1)
	env.Root.Send(root, &protocol.Unsubscribe{Name: s.spec.Name, Ctx: hard, Graceful: grace, Done: done})
	select {
	case err := <-done:
		return err
	case <-hard.Done():
		return hard.Err()
	}
}

// Pause stops granting credit: the broker stops sending once what was
// granted has arrived; deliveries already held are handled and settled.
// A subscription paused before it attaches (before Start) attaches paused.
func (s *Subscription) Pause() { s.setPaused(true) }

// Resume grants credit again after Pause.
func (s *Subscription) Resume() { s.setPaused(false) }

// setPaused records the wish, which attach hands to a subscription not yet
// attached, and tells a running one. Both happen under the App's lock, so a
// Pause never overtakes its subscription's Subscribe (and is never lost to
// a connection that does not know the subscription yet).
func (s *Subscription) setPaused(p bool) {
	if s == nil {
		return
	}
	for _, x := range s.parts {
		x.setPaused(p)
	}
	if s.parts != nil {
		return
	}
	a := s.app
	a.mu.Lock()
	defer a.mu.Unlock()
	s.paused = p
	if a.root == nil {
		return
	}
	if p {
		a.env.Root.Send(a.root, &protocol.Pause{Name: s.spec.Name})
	} else {
		a.env.Root.Send(a.root, &protocol.Resume{Name: s.spec.Name})
	}
}

// Subscribe runs h for every delivery from addr. Before Start it only
// registers; after Start it attaches at once and returns the broker's answer.
//
// A topic subscription receives through a durable node of its own, named
// after the subscription (WithSubscriptionName; by default the App's name and
// the topic's): every App subscribing with that name, the replicas of one
// service, competes on it, each message going to one of them, and it keeps
// what is published while every one of them is down or re-attaching. It
// lives on the broker until deleted there (RabbitMQ 4: the quorum queue
// TOPIC.NAME; Artemis: the queue NAME of the topic's address; Service Bus:
// the subscription NAME; the in-process broker: as long as the Broker).
// WithEphemeral, or an App without WithName (unless WithSubscriptionName
// names the subscription), gives a private node instead.
// Two subscriptions of one App to one topic are two nodes, each getting
// every message.
func (a *App) Subscribe(addr Address, h Handler, opts ...SubscribeOption) (*Subscription, error) {
	if h == nil {
		return nil, errors.New("amqpactor: Subscribe: nil handler")
	}
	if err := descriptorOf(h).invalid; err != nil {
		return nil, fmt.Errorf("amqpactor: Subscribe: %w", err)
	}
	return a.subscribe(addr, h, nil, opts)
}

// SubscribeBatch runs h for batches of deliveries from addr (WithBatch sets
// the size and the wait; the credit caps the size).
func (a *App) SubscribeBatch(addr Address, h BatchHandler, opts ...SubscribeOption) (*Subscription, error) {
	if h == nil {
		return nil, errors.New("amqpactor: SubscribeBatch: nil handler")
	}
	return a.subscribe(addr, nil, h, opts)
}

func (a *App) subscribe(addr Address, h Handler, bh BatchHandler, opts []SubscribeOption) (*Subscription, error) {
	var c subConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if err := a.checkAddress(addr, address.Receive); err != nil {
		return nil, err
	}
	if !c.retry.RetryAddress.IsZero() {
		if err := a.checkAddress(c.retry.RetryAddress, address.Send); err != nil {
			return nil, fmt.Errorf("amqpactor: retry address: %w", err)
		}
	}
	if !c.retry.DeadLetter.IsZero() {
		if err := a.checkAddress(c.retry.DeadLetter, address.Send); err != nil {
			return nil, fmt.Errorf("amqpactor: dead-letter address: %w", err)
		}
	}
	if c.retry.Backoff < 0 || c.retry.MaxBackoff < 0 {
		return nil, fmt.Errorf("amqpactor: Subscribe %s: negative backoff %v, %v", addr, c.retry.Backoff, c.retry.MaxBackoff)
	}
	qargs, err := transport.QueueArguments(c.queueArgs)
	if err != nil {
		return nil, fmt.Errorf("amqpactor: Subscribe %s: %w", addr, err)
	}
	if qargs, err = a.delayedRetryArgs(addr, &c, qargs); err != nil {
		return nil, err
	}
	keys, err := address.ParseBindingKeys(addr, c.keys)
	if ck, ok := a.Connector().(transport.BindingKeysChecker); ok && err == nil {
		err = ck.CheckBindingKeys(addr, keys)
	}
	if err == nil {
		err = a.checkStream(addr, c.offset, c.filter)
	}
	if err != nil {
		return nil, err // an *AddressError, naming the address
	}
	retry := c.retry.effective()
	if c.credit == 0 {
		c.credit = DefaultCredit
	}
	if c.partitions <= 0 {
		c.partitions = DefaultPartitions
		if bh != nil {
			c.partitions = 1
		}
	}
	if c.batchSize <= 0 {
		c.batchSize = 100
	}
	fails := &failureLog{log: a.log, addr: addr.String()}
	spec := &protocol.SubscriptionSpec{
		Address: addr, Credit: c.credit, Partitions: c.partitions, Settled: c.settled, Classic: c.classic,
		BatchSize: c.batchSize, BatchWait: c.batchWait,
		Outcome:        a.outcomer(&subPolicy{p: retry, src: addr, classic: c.classic, log: fails}),
		QueueArguments: qargs, DeadLetter: retry.DeadLetter, DeliveryLimit: retry.MaxDeliveries,
		HandlerTimeout: c.timeout, BindingKeys: keys,
	}
	if addr.IsStream() {
		var start StreamOffset
		if c.offset != nil {
			start = *c.offset
		}
		spec.Stream = protocol.NewStreamCursor(start, c.filter)
	}
	if retry.Backoff > 0 {
		spec.Retry = protocol.Retry{Backoff: retry.Backoff, MaxBackoff: retry.MaxBackoff, MaxDeliveries: retry.MaxDeliveries,
			Retryable: retryable,
			Failed: func(_ context.Context, err error, m *Message, wait time.Duration) {
				fails.warn(m, m.DeliveryCount, "retried in place after "+wait.Round(time.Millisecond).String(), err)
			}}
	}
	if h != nil {
		spec.Handler = protocol.Handler(h)
	} else {
		spec.BatchHandler = protocol.BatchHandler(bh)
	}
	if c.retry != (RetryPolicy{}) {
		// Handlers under a retry policy see the count a retried copy
		// carries (RetryCountAnnotation), as the outcome does.
		if h != nil {
			spec.Handler = func(ctx context.Context, m *Message) error {
				m.DeliveryCount = retriedCount(m)
				return h(ctx, m)
			}
		} else {
			spec.BatchHandler = func(ctx context.Context, ms []*Message) error {
				for _, m := range ms {
					m.DeliveryCount = retriedCount(m)
				}
				return bh(ctx, ms)
			}
		}
	}
	s := &Subscription{app: a, spec: spec, info: newSubInfo(h, bh, c)}
	// What runs: s itself, or for a Partitioned address one subscription
	// per partition queue (partitioned.go).
	run := []*Subscription{s}
	if addr.Kind() == address.KindPartitioned {
		s.parts = partitionSubs(s)
		run = s.parts
	}

	// A Subscribe while Start runs waits for it: Start attaches the
	// subscriptions it knew when it began, a later one attaches here.
	_ = a.awaitStart(context.Background())
	a.mu.Lock()
	if a.state == stateStopped {
		a.mu.Unlock()
		return nil, ErrStopped
	}
	spec.Name = a.subName(c.name, addr)
	if addr.Kind() == address.KindTopic && (c.ephemeral || a.unnamed && c.name == "") {
		spec.Ephemeral = true
		spec.Node = spec.Name + "." + a.instance
	}
	for i, p := range s.parts {
		p.spec.Name = a.subName(spec.Name+".p"+strconv.Itoa(i), p.spec.Address)
	}
	for _, x := range run {
		a.instrument(x.spec, retry) // tracing and metrics (telemetry.go)
		a.subs = append(a.subs, x)
	}
	started, root, env := a.state == stateStarted, a.root, a.env
	a.mu.Unlock()
	if !started {
		return s, nil
	}
	// Subscribe has no context of its own: the attach's own bound is its
	// bound (actors.Env.AttachCtx), never the close timeout.
	ctx, cancel := env.AttachCtx(nil)
	defer cancel()
	for i, x := range run {
		if err := a.attach(ctx, root, x, true); err != nil {
			a.mu.Lock()
			a.subs = slices.DeleteFunc(a.subs, func(y *Subscription) bool { return slices.Contains(run, y) })
			a.mu.Unlock()
			// The partitions attached already detach again: all or none.
			cctx, ccancel := env.CloseCtx(context.Background())
			defer ccancel()
			for _, y := range run[:i] {
				_ = y.Close(cctx)
			}
			return nil, err
		}
	}
	return s, nil
}

// subName makes a name unique within the App. It is the same in every
// instance of a service that subscribes in the same order, so their topic
// subscriptions share one node; the App's name keeps services apart.
func (a *App) subName(name string, addr Address) string {
	if name == "" {
		name = a.cfg.name + "." + addr.Name()
	}
	n := a.names[name]
	a.names[name] = n + 1
	if n > 0 {
		name += "." + strconv.Itoa(n+1)
	}
	return name
}

// attach subscribes s on the running tree and waits for its first attach,
// bounded by ctx. With undo a subscription whose first attach failed is taken
// down again here; Start passes false, since its teardown takes down all.
func (a *App) attach(ctx context.Context, root *actor.PID, s *Subscription, undo bool) error {
	if err := a.treeErr(); err != nil {
		return fmt.Errorf("amqpactor: subscribing to %s: %w", s.spec.Address, err)
	}
	done := make(chan error, 1)
	a.mu.Lock()
	s.spec.Paused = s.paused
	s.spec.AttachCtx = ctx
	a.env.Root.Send(root, &protocol.Subscribe{Spec: s.spec, Done: done})
	a.mu.Unlock()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	case <-a.env.Stopped():
		// The tree stopped: a stopping root drops what its mailbox holds,
		// so no answer may come.
		if err = a.treeErr(); err == nil {
			err = ErrStopped
		}
	}
	if err != nil {
		if a.stopCtx.Err() != nil || !undo {
			// Stopping, or a Start that failed: the teardown takes every
			// subscription down, within one close timeout, rather than
			// this one first and the rest after it.
			return fmt.Errorf("amqpactor: subscribing to %s: %w", s.spec.Address, err)
		}
		// Take it down again: a subscription whose first attach failed is
		// not retried behind the caller's back.
		uctx, cancel := a.env.CloseCtx(context.Background())
		defer cancel()
		udone := make(chan error, 1)
		a.env.Root.Send(root, &protocol.Unsubscribe{Name: s.spec.Name, Ctx: uctx, Done: udone})
		select {
		case <-udone:
		case <-uctx.Done():
		case <-a.env.Stopped():
		}
		return fmt.Errorf("amqpactor: subscribing to %s: %w", s.spec.Address, err)
	}
	return nil
}

// Subscription returns the App's subscription named name, or nil when it
// has none by that name. The name is Subscription.Name: the one its node has
// in the tree after "subscription:" (WithSubscriptionName, or the App's
// name and the address's). A Partitioned address runs one subscription per
// partition queue, each under a name of its own (the name with ".p0",
// ".p1", ...), each found by it; the whole, which runs nothing itself,
// is not. The debug handler uses it to pause and resume a subscription by
// name (debug.WithControl).
func (a *App) Subscription(name string) *Subscription {
	if a == nil || name == "" {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.subs {
		if s.spec.Name == name {
			return s
		}
	}
	return nil
}

// checkStream checks a subscription to addr with the stream offset o (nil:
// none given) and the filters before anything reaches the wire.
func (a *App) checkStream(addr Address, o *StreamOffset, f address.StreamFilter) error {
	if err := address.CheckStreamFilter(addr, f); err != nil {
		return err
	}
	var start StreamOffset
	if o != nil {
		start = *o
	}
	if err := address.CheckStreamOffset(addr, start, o != nil); err != nil {
		return err
	}
	if ck, ok := a.Connector().(transport.StreamChecker); ok && addr.IsStream() {
		return ck.CheckStream(addr)
	}
	return nil
}
