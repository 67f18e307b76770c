package amqpactor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/connection"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/budget"
	"github.com/amqpactor/amqpactor/internal/ctxdone"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/transport"
)

// App is one service: its subscriptions, its publisher, request/reply and
// transactions, all run by an actor tree rooted at the connection actor,
// with as many more connections under it as the subscriptions' sessions
// need (WithMaxSessionsPerConnection).
type App struct {
	cfg appConfig
	log *slog.Logger

	// ctxs spreads the publishes waiting on one context over channels of
	// the App's own (ctxdone), let go when the App stops.
	ctxs ctxdone.Table
	// actorCopies maps the copy of a message an ActorHandler's actor was
	// handed to the delivery's own, for Tx.Accept.
	actorCopies sync.Map

	mu        sync.Mutex
	connector Connector
	checker   atomic.Pointer[messageChecker] // the connector's, or nil
	state     int                            // stateNew, stateStarting, stateStarted, stateStopped
	// startDone is closed when a Start returns; startErr is why it failed.
	startDone chan struct{}
	startErr  error
	// stopCtx ends when the App stops: a Start in progress gives up.
	stopCtx    context.Context
	stopCancel context.CancelFunc
	// tearing: a teardown has begun; stopDone is closed when it is over.
	tearing  bool
	stopDone chan struct{}
	// live is set, under mu, once Start has succeeded, until Stop.
	live     atomic.Pointer[liveApp]
	sys      *actor.ActorSystem
	ownSys   bool
	pool     *actors.Pool
	env      *actors.Env
	root     *actor.PID
	children connection.Children
	subs     []*Subscription
	names    map[string]int

	// instance is random per App: it keeps the ephemeral subscription
	// nodes of two instances with one name apart. unnamed: the name is
	// random too (no WithName).
	instance string
	unnamed  bool

	seq       atomic.Uint64
	addrCache sync.Map      // Address -> error, for addresses already checked
	addrN     atomic.Int64  // entries in addrCache, bounded by maxCheckedAddresses
	partRR    atomic.Uint64 // round robin of Partitioned publishes without a group-id

	// State changes (state.go): events delivers them while the App
	// runs; watchers are the WatchStateChanges functions.
	events       *stateEvents
	nodes        nodeStates // every node's last state, for Health and Ready
	stateDropped atomic.Uint64
	watchMu      sync.Mutex
	watchers     map[uint64]func(StateChange)
	watchSeq     uint64

	pub *actorPublisher // the Publisher actor, once asked for (actorapi.go)

	// gone is why the App's actor tree stopped by itself while the App
	// ran (its connection actor kept panicking): set once, by the watch of
	// the root (treeWatch), on the root's goroutine; read by every call.
	gone atomic.Pointer[error]
	// failing is the same error from the moment the connection's node
	// turns failed with a *NodeError, the root's last word before it stops
	// the tree (the children go first, and the root reports stopped after):
	// set by Env.OnState, read by every call.
	failing atomic.Pointer[error]
	// watch is the process that watches the root for its end, and dead
	// the EventStream subscription that answers what was sent to a gone
	// actor of the tree; both under mu.
	watch *actor.PID
	dead  *eventstream.Subscription
	// treeEnded is closed when the root has terminated; under mu.
	treeEnded <-chan struct{}

	tel   *telemetry   // OpenTelemetry (telemetry.go)
	dests destinations // what is kept per address sent to (destination.go)
}

const (
	stateNew = iota
	stateStarting
	stateStarted
	stateStopped
)

// ErrNotStarted is returned by calls that need a running App (Publish,
// Request, Transaction, Tree) before Start. A call made while Start runs
// waits for it instead, bounded by the call's own context.
var ErrNotStarted = errors.New("amqpactor: the App is not started")

// errNil reports a nil argument of op.
func errNil(op, what string) error {
	return fmt.Errorf("amqpactor: %s: nil %s", op, what)
}

// New returns an App on c. Nothing connects until Start. A nil connector
// makes Start (and every address check) fail.
func New(c Connector, opts ...Option) *App {
	a := &App{connector: c, names: map[string]int{}, startDone: make(chan struct{}), stopDone: make(chan struct{})}
	a.setChecker(c)
	a.stopCtx, a.stopCancel = context.WithCancel(context.Background())
	for _, o := range opts {
		if o != nil {
			o(&a.cfg)
		}
	}
	a.log = a.cfg.log
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	a.tel = newTelemetry(a.cfg.otel, a.telemetryError)
	var b [4]byte
	_, _ = rand.Read(b[:])
	a.instance = hex.EncodeToString(b[:])
	if a.cfg.name == "" {
		a.cfg.name = "app-" + a.instance
		a.unnamed = true
	}
	return a
}

// Connector returns the connector the App runs on.
func (a *App) Connector() Connector {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.connector
}

// replaceConnector puts the App on c instead, before Start. It is for tests
// of a service: the App is built as production builds it and run on a test
// connector instead (inproctest.Start does this with the in-process broker,
// through testhook.ReplaceConnector).
func (a *App) replaceConnector(c Connector) error {
	if c == nil {
		return errNil("ReplaceConnector", "connector")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state != stateNew {
		return errors.New("amqpactor: ReplaceConnector after Start")
	}
	a.connector = c
	a.setChecker(c)
	a.addrCache.Clear()
	a.addrN.Store(0)
	return nil
}

// The hook is set here, not exported, so that only the module's own test
// helpers can put an App on another connector.
func init() {
	testhook.ReplaceConnector = func(app any, c transport.Connector) error {
		return app.(*App).replaceConnector(c)
	}
}

// messageChecker is implemented by a Connector whose wire cannot carry
// every message (AMQP 0-9-1 has no amqp-value body, no unsigned 64-bit
// header): a publish it refuses fails at once with its reason, rather than
// reaching a sender, which takes every failed send for a lost link and
// tries again.
type messageChecker interface {
	CheckMessage(m *amqp.Message) error
}

func (a *App) setChecker(c Connector) {
	mc, _ := c.(messageChecker)
	a.checker.Store(&mc)
}

func (a *App) checkAddress(addr Address, role address.Role) error {
	type key struct {
		a Address
		r address.Role
	}
	k := key{addr, role}
	if v, ok := a.addrCache.Load(k); ok {
		if v == nil {
			return nil
		}
		return v.(error)
	}
	c := a.Connector()
	if c == nil {
		return errNilConnector
	}
	_, err := address.Render(c.Dialect(), addr, role, "x")
	// Peers choose the reply-to addresses a Responder answers, so the
	// cache stops growing at its bound; past it an address is checked
	// every time, which is all the cache saves.
	if a.addrN.Load() < maxCheckedAddresses {
		if _, loaded := a.addrCache.LoadOrStore(k, err); !loaded {
			a.addrN.Add(1)
		}
	}
	return err
}

// maxCheckedAddresses bounds the addresses checkAddress remembers.
const maxCheckedAddresses = 4096

// Start connects and attaches every subscription. A broker that refuses the
// connection or an attach makes Start return its error, naming the address;
// the App is then stopped, and so it is when ctx ends or Stop is called
// before Start has finished: nothing it opened stays open. An App starts
// once: Start after Start, or after Stop, is an error (after Stop one that
// errors.Is ErrStopped).
//
// Publish, Request, Transaction and Subscribe called while Start runs wait
// for it (bounded by their own context) and then go on, or fail with Start's
// error.
//
// ctx bounds the dial, and each subscription's session begin and attach,
// together with a bound of their own (30 s), whichever ends first; the close
// timeout (WithCloseTimeout) never does. What a failed Start closes is
// bounded by the close timeout.
func (a *App) Start(ctx context.Context) error {
	if ctx == nil {
		return errNil("Start", "context")
	}
	finish, err := a.begin(ctx, nil, nil)
	if err != nil {
		return err
	}
	return finish()
}

// begin is the part of Start that never waits for the broker: it checks
// the state, prepares the environment and spawns the connection actor, from
// parent when it is not nil (App.Props spawns it from the app actor's
// context, so the tree hangs under that actor), else from the system's root
// context. sys, when not nil, is the actor system to run on (the app
// actor's). finish does the rest: it waits for the connection and attaches
// the subscriptions, and returns what Start returns.
func (a *App) begin(ctx context.Context, sys *actor.ActorSystem, parent actor.SpawnerContext) (finish func() error, err error) {
	a.mu.Lock()
	switch a.state {
	case stateStopped:
		a.mu.Unlock()
		return nil, fmt.Errorf("amqpactor: Start: %w", ErrStopped)
	case stateStarting, stateStarted:
		a.mu.Unlock()
		return nil, errors.New("amqpactor: Start called twice")
	}
	if sys != nil && a.cfg.system != nil && a.cfg.system != sys {
		a.mu.Unlock()
		return nil, errors.New("amqpactor: Start: the App's actor system (WithActorSystem) is not the one it is spawned on")
	}
	connector := a.connector
	if connector == nil {
		a.state = stateStopped
		a.startErr = errNilConnector
		close(a.startDone)
		a.mu.Unlock()
		return nil, a.startErr
	}
	if err := ctx.Err(); err != nil {
		// Nothing was opened: the App is stopped, as after any failed Start.
		a.state = stateStopped
		a.startErr = fmt.Errorf("amqpactor: connecting to %s: %w", connector, err)
		close(a.startDone)
		a.mu.Unlock()
		return nil, a.startErr
	}
	a.state = stateStarting
	a.sys, a.ownSys = a.cfg.system, false
	if sys != nil {
		a.sys = sys
	}
	if a.sys == nil {
		a.ownSys = true
		a.sys = newActorSystem(a.log)
	}
	a.pool = actors.NewPool(4 * runtime.GOMAXPROCS(0))
	a.events = a.startStateEvents(a.sys)
	a.env = &actors.Env{
		Mailboxes: a.pool,
		Base:      context.WithValue(context.Background(), appKey{}, a),
		Log:       a.log, Dialect: connector.Dialect(), Root: a.sys.Root,
		Backoff:      actors.Backoff{Initial: a.cfg.backoff[0], Max: a.cfg.backoff[1]},
		CloseTimeout: a.cfg.closeTimeout,
		MaxSenders:   a.cfg.maxSenders,
		SenderIdle:   a.cfg.senderIdle,
		MaxSessions:  a.cfg.maxSessions,
		Supervisor:   a.cfg.supervisor,
		Budget:       budget.New(maxInFlight(a.cfg.maxInFlight)),
		OnState: func(m protocol.StateChange) {
			a.nodes.record(m)
			var ne *NodeError
			if m.Path == actors.RootNode.Path && m.To == actors.StateFailed && errors.As(m.Err, &ne) {
				err := fmt.Errorf("%w: %w", ErrStopped, ne)
				a.failing.Store(&err)
			}
			a.events.put(m)
		},
	}
	started := make(chan connection.Started, 1)
	if parent == nil {
		parent = a.sys.Root
	}
	root, err := parent.SpawnNamed(connection.New(a.env, connector, started), "amqpactor:"+a.cfg.name)
	if err != nil {
		a.mu.Unlock()
		return nil, a.failStart(ctx, err)
	}
	a.root = root
	a.watch, a.treeEnded = watchTree(a, root)
	a.dead = a.sys.EventStream.Subscribe(a.answerDeadLetters(root.Id))
	subs := append([]*Subscription(nil), a.subs...)
	a.mu.Unlock()
	return func() error { return a.finishStart(ctx, connector, root, subs, started) }, nil
}

// finishStart is the waiting part of Start (see begin).
func (a *App) finishStart(ctx context.Context, connector Connector, root *actor.PID, subs []*Subscription, started chan connection.Started) error {
	// Stop while Start runs cancels the Start.
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopAfter := context.AfterFunc(a.stopCtx, func() { cancel(ErrStopped) })
	defer stopAfter()

	var res connection.Started
	select {
	case res = <-started:
	case <-sctx.Done():
		res.Err = context.Cause(sctx)
	}
	if res.Err != nil {
		if cause := context.Cause(sctx); errors.Is(cause, ErrStopped) && !errors.Is(res.Err, ErrStopped) {
			// The dial failed because Stop gave up on it.
			res.Err = fmt.Errorf("%w (%w)", cause, res.Err)
		}
		return a.failStart(ctx, fmt.Errorf("amqpactor: connecting to %s: %w", connector, res.Err))
	}
	a.mu.Lock()
	a.children = res.Children
	a.mu.Unlock()
	for _, s := range subs {
		if err := a.attach(sctx, root, s, false); err != nil {
			if cause := context.Cause(sctx); errors.Is(cause, ErrStopped) && !errors.Is(err, ErrStopped) {
				err = fmt.Errorf("%w (%w)", err, cause)
			}
			return a.failStart(ctx, err)
		}
	}
	a.mu.Lock()
	if a.state != stateStarting {
		// Stopped just now: the Stop tears down what Start opened.
		a.mu.Unlock()
		return a.failStart(ctx, fmt.Errorf("amqpactor: Start: %w", ErrStopped))
	}
	a.state = stateStarted
	a.live.Store(&liveApp{env: a.env, children: res.Children})
	close(a.startDone)
	pub, env := a.pub, a.env
	a.mu.Unlock()
	if pub != nil {
		// Asked for before Start: its actor joins the tree now.
		pub.adopt(env, root)
	}
	return nil
}

var errNilConnector = errors.New("amqpactor: the App has a nil connector")

// failStart ends a Start that failed with err: the App is stopped and
// everything Start opened is closed before Start returns, bounded by the
// close timeout (not by ctx, which may be what ended the Start).
func (a *App) failStart(ctx context.Context, err error) error {
	a.mu.Lock()
	if a.state == stateStarting {
		a.state = stateStopped
		a.startErr = err
		a.live.Store(nil)
		close(a.startDone)
	}
	own := a.claimTeardown()
	a.mu.Unlock()
	a.stopCancel()
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout(a.cfg.closeTimeout))
	defer cancel()
	_ = a.shutdown(hctx, own)
	return err
}

// awaitStart waits, bounded by ctx, for a Start in progress. It returns nil
// once the App is started, ErrNotStarted before Start, and an error that
// errors.Is ErrStopped (and wraps Start's error) after Stop or a failed Start.
func (a *App) awaitStart(ctx context.Context) error {
	a.mu.Lock()
	state, done := a.state, a.startDone
	a.mu.Unlock()
	switch state {
	case stateNew:
		return ErrNotStarted
	case stateStarting:
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("amqpactor: waiting for Start: %w", ctx.Err())
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.state == stateStarted:
		return nil
	case a.startErr != nil && !errors.Is(a.startErr, ErrStopped):
		return fmt.Errorf("%w: Start failed: %w", ErrStopped, a.startErr)
	}
	return ErrStopped
}

// Stop stops gracefully: credit stops, handlers in flight finish and settle,
// receivers detach, publish confirmations are awaited, senders detach,
// sessions end and the connection closes. The whole stop is bounded by
// ctx's deadline, or by WithCloseTimeout when ctx has none. The graceful part
// ends a little before that bound (a quarter of the time left, at most a
// second, is kept for the rest): then the handlers' contexts are cancelled,
// every delivery not settled yet goes back to the broker as released (never
// accepted, never lost), and links, sessions and the connection close. Stop
// always returns by the bound.
//
// Stop during Start cancels the Start (which returns an error). Stop before
// Start, or again after Stop, returns nil; the App cannot start afterwards.
func (a *App) Stop(ctx context.Context) error {
	if ctx == nil {
		return errNil("Stop", "context")
	}
	a.mu.Lock()
	switch a.state {
	case stateNew:
		a.state = stateStopped
		a.startErr = ErrStopped
		close(a.startDone)
		a.mu.Unlock()
		a.stopCancel()
		return a.stopPublisher()(ctx)
	case stateStopped:
		tearing, done := a.tearing, a.stopDone
		a.mu.Unlock()
		if !tearing {
			return nil
		}
		// Another Stop (or a failed Start) is tearing down: wait for it.
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("amqpactor: stop: %w", ctx.Err())
		}
	case stateStarting:
		// Start sees the cancellation and gives up; the teardown is ours.
		a.state = stateStopped
		a.startErr = ErrStopped
		close(a.startDone)
	default:
		a.state = stateStopped
	}
	a.live.Store(nil)
	own := a.claimTeardown()
	a.mu.Unlock()
	a.stopCancel()
	return a.shutdown(ctx, own)
}

// claimTeardown reports whether the caller is the first to tear the App
// down (and so must). Call it with mu held.
func (a *App) claimTeardown() bool {
	if a.tearing {
		return false
	}
	a.tearing = true
	return true
}

// shutdown tears the App down when own; otherwise it waits for the owner,
// bounded by ctx.
func (a *App) shutdown(ctx context.Context, own bool) error {
	if !own {
		select {
		case <-a.stopDone:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("amqpactor: stop: %w", ctx.Err())
		}
	}
	defer close(a.stopDone)
	return a.teardown(ctx)
}

// closeTimeout is d, or the default when d is zero.
func closeTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return 5 * time.Second
	}
	return d
}

// stopBounds splits a stop bounded by ctx (or, without a deadline, by the
// close timeout d) into the graceful part and the whole: grace ends when a
// quarter of the time is left (at most a second), which the cut (releasing
// what is unsettled, closing links, sessions and the connection) has to
// itself.
func stopBounds(ctx context.Context, d time.Duration) (hard, grace context.Context, cancel context.CancelFunc) {
	hard, cancelHard := context.WithTimeout(ctx, closeTimeout(d))
	if _, ok := ctx.Deadline(); ok {
		hard, cancelHard = context.WithCancel(ctx)
	}
	dl, _ := hard.Deadline()
	reserve := min(time.Until(dl)/4, time.Second)
	grace, cancelGrace := context.WithDeadline(hard, dl.Add(-reserve))
	return hard, grace, func() { cancelGrace(); cancelHard() }
}

func (a *App) teardown(ctx context.Context) error {
	// Last: every publish has returned by then, or is woken by the stopped
	// tree (or the table's Stop) rather than by the table's channels.
	defer a.ctxs.Close()
	// The Publisher actor takes no request from now on; its publishes in
	// flight end with the drain.
	waitPublishes := a.stopPublisher()
	a.mu.Lock()
	a.live.Store(nil)
	root, env, sys, own, pool, events, watch, dead, ended := a.root, a.env, a.sys, a.ownSys, a.pool, a.events, a.watch, a.dead, a.treeEnded
	a.root, a.watch, a.dead = nil, nil, nil
	a.mu.Unlock()
	if watch != nil {
		// The root's end is the App's own stop from now on.
		defer sys.ProcessRegistry.Remove(watch)
	}
	if dead != nil {
		defer sys.EventStream.Unsubscribe(dead)
	}
	if env == nil {
		return waitPublishes(ctx)
	}
	hard, grace, cancel := stopBounds(ctx, a.cfg.closeTimeout)
	defer cancel()
	var errs []error
	if _, alive := sys.ProcessRegistry.Get(root); root != nil && !alive {
		// The tree stopped by itself (its connection actor kept
		// panicking): nothing would answer a drain.
		errs = append(errs, fmt.Errorf("amqpactor: stop: the App's actor tree had already stopped"))
		root = nil
	}
	if root != nil {
		done := make(chan error, 1)
		env.Root.Send(root, &protocol.Drain{Ctx: hard, Graceful: grace, Done: done})
		select {
		case err := <-done:
			errs = append(errs, err)
		case <-ended:
			// It stopped by itself meanwhile, dropping the drain.
			errs = append(errs, fmt.Errorf("amqpactor: stop: the App's actor tree had already stopped"))
		case <-hard.Done():
			errs = append(errs, fmt.Errorf("amqpactor: stop: %w", hard.Err()))
		}
		// Poison follows the drain through the mailbox: the tree stops
		// after it has drained.
		if err := sys.Root.PoisonFuture(root).Wait(); err != nil && !errors.Is(err, actor.ErrTimeout) {
			errs = append(errs, err)
		}
	}
	if err := waitPublishes(hard); err != nil {
		errs = append(errs, err)
	}
	env.MarkStopped()
	a.ctxs.Stop()
	if err := env.Wait(hard); err != nil {
		errs = append(errs, fmt.Errorf("amqpactor: stop: waiting for the actors' goroutines: %w", err))
	}
	// Every node's stopped is queued by now (the root has stopped, and
	// with it every actor): deliver them before the system goes.
	if err := events.stop(hard); err != nil {
		errs = append(errs, fmt.Errorf("amqpactor: stop: delivering state changes: %w", err))
	}
	pool.Close()
	if own {
		sys.Shutdown()
	}
	return errors.Join(errs...)
}

// Run starts the App, blocks until ctx is done, and stops it, the stop
// bounded by WithStopTimeout (DefaultStopTimeout without it).
func (a *App) Run(ctx context.Context) error {
	if ctx == nil {
		return errNil("Run", "context")
	}
	if err := a.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	d := a.cfg.stopTimeout
	if d <= 0 {
		d = DefaultStopTimeout
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	return a.Stop(sctx)
}

// running returns the running App's environment, waiting (bounded by ctx)
// for a Start in progress.
func (a *App) running(ctx context.Context) (*actors.Env, connection.Children, error) {
	// Every publish asks: a started App answers without the lock that 64
	// publishers would queue on.
	if l := a.live.Load(); l != nil {
		return l.env, l.children, nil
	}
	if g := a.gone.Load(); g != nil {
		return nil, connection.Children{}, *g
	}
	if err := a.awaitStart(ctx); err != nil {
		return nil, connection.Children{}, err
	}
	if l := a.live.Load(); l != nil {
		return l.env, l.children, nil
	}
	return nil, connection.Children{}, ErrStopped
}

// liveApp is what running returns for a started App.
type liveApp struct {
	env      *actors.Env
	children connection.Children
}

// Tree returns a snapshot of the live actor tree: every node with its kind,
// name, address, state and counters.
func (a *App) Tree(ctx context.Context) (*Node, error) {
	if ctx == nil {
		return nil, errNil("Tree", "context")
	}
	a.mu.Lock()
	root, sys, state := a.root, a.sys, a.state
	a.mu.Unlock()
	if root == nil || state == stateStopped {
		if state == stateNew {
			return nil, ErrNotStarted
		}
		return nil, ErrStopped
	}
	n, err := describe(ctx, sys, root)
	if err == nil {
		a.budgetCounters(n)
	}
	return n, err
}

// maxInFlight is the budget of WithMaxInFlightBytes(n).
func maxInFlight(n int64) int64 {
	if n == 0 {
		return DefaultMaxInFlightBytes
	}
	return n
}

// budgetCounters puts the App's bytes in flight on the root of its tree:
// the budget is the App's, not the connection actor's.
func (a *App) budgetCounters(n *Node) {
	a.mu.Lock()
	env := a.env
	a.mu.Unlock()
	if env == nil || env.Budget == nil {
		return
	}
	if n.Counters == nil {
		n.Counters = map[string]uint64{}
	}
	b := env.Budget
	n.Counters["inflight_bytes"] = uint64(max(b.InFlight(), 0))
	n.Counters["inflight_bytes_peak"] = uint64(max(b.Peak(), 0))
}

// childDescribeBound bounds the ask of each child in a Tree; a child past
// it is listed as gone, with the error.
const childDescribeBound = time.Second

func describe(ctx context.Context, sys *actor.ActorSystem, pid *actor.PID) (*Node, error) {
	timeout := time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		// Past the deadline before the context's own timer has fired,
		// ctx.Err() can still be nil: never answer (nil, nil).
		return nil, context.DeadlineExceeded
	}
	res, err := sys.Root.RequestFuture(pid, &protocol.Describe{}, timeout).Result()
	if err != nil {
		return nil, fmt.Errorf("amqpactor: describing %s: %w", pid.Id, err)
	}
	d, ok := res.(*protocol.Described)
	if !ok {
		return nil, fmt.Errorf("amqpactor: describing %s: unexpected answer %T", pid.Id, res)
	}
	n := d.Node
	// The PID asked is the node's PID, unless another actor answered: kept
	// as structured data here, so Node.ActorPID never parses the text form.
	if d.Self != nil {
		pid = d.Self
	}
	n.SetActorPID(pid)
	for _, c := range d.Children {
		// A child that is stopping never answers: a bound of its own keeps
		// it from taking the whole tree's deadline (an actor that runs
		// answers within a mailbox turn).
		if _, alive := sys.ProcessRegistry.GetLocal(c.Id); !alive {
			// Its parent still lists it, protoactor knows it no more:
			// drawn failed, never as the state it had.
			n.Children = append(n.Children, goneNode(c, errors.New("its actor is gone")))
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, childDescribeBound)
		cn, err := describe(cctx, sys, c)
		cancel()
		if err != nil {
			// A child that stopped between the two asks is not an error
			// of the tree; note it and go on.
			gone := &Node{Name: c.Id, PID: c.String(), State: protocol.StateDetached, LastError: err.Error()}
			gone.SetActorPID(c)
			if _, alive := sys.ProcessRegistry.GetLocal(c.Id); !alive {
				gone = goneNode(c, err)
			}
			n.Children = append(n.Children, gone)
			continue
		}
		n.Children = append(n.Children, cn)
	}
	// Children whose actors stopped for good, shown as they were last.
	n.Children = append(n.Children, d.Gone...)
	return n, nil
}

// treeWatch is told when the App's root actor terminates: a process of
// its own in the registry that the root counts among its watchers, so the
// App learns it without an actor to receive Terminated.
type treeWatch struct {
	app   *App
	env   *actors.Env
	sys   *actor.ActorSystem
	self  *actor.PID
	ended chan struct{} // closed when the root has terminated
}

// watchTree watches root for a (called with a.mu held, after spawning it).
// The channel is closed when the root has terminated.
func watchTree(a *App, root *actor.PID) (*actor.PID, <-chan struct{}) {
	w := &treeWatch{app: a, env: a.env, sys: a.sys, ended: make(chan struct{})}
	w.self, _ = a.sys.ProcessRegistry.Add(w, "amqpactor-treewatch$"+a.sys.ProcessRegistry.NextId())
	p, _ := a.sys.ProcessRegistry.Get(root)
	p.SendSystemMessage(root, &actor.Watch{Watcher: w.self})
	return w.self, w.ended
}

func (*treeWatch) SendUserMessage(*actor.PID, any) {}
func (*treeWatch) Stop(*actor.PID)                 {}

// SendSystemMessage runs on the root's goroutine as it terminates: it
// never blocks.
func (w *treeWatch) SendSystemMessage(_ *actor.PID, m any) {
	if _, ok := m.(*actor.Terminated); !ok {
		return
	}
	w.sys.ProcessRegistry.Remove(w.self)
	w.app.treeStopped(w.env)
	close(w.ended)
}

// treeStopped fails the App's calls at once when its tree stopped while
// the App runs: every publish, request, transaction and subscribe waiting
// on it, and every one after, with an error that wraps ErrStopped and the
// *NodeError of the connection (the node Health names).
func (a *App) treeStopped(env *actors.Env) {
	if a.stopCtx.Err() != nil {
		return // the App's own Stop, or a failed Start
	}
	err := a.treeErr()
	if err == nil {
		err = fmt.Errorf("%w: %w", ErrStopped, &NodeError{Path: actors.RootNode.Path, Kind: "connection",
			Address: a.Connector().String(), Err: errors.New("the App's actor tree stopped")})
	}
	a.gone.Store(&err)
	a.live.Store(nil)
	env.MarkStopped()
	a.ctxs.Stop()
}

// answerDeadLetters returns the EventStream handler that answers the work
// sent to an actor of the tree under root (its PID's Id, or one under it)
// that is gone: protoactor hands such a message to its dead letters, where
// nothing would ever answer it, and its caller would wait out its context.
// It answers with a *NodeError naming the node (wrapping why the tree
// stopped, when it did). It runs on the sender's goroutine: it never blocks,
// and a message of another App's tree is not its to answer.
func (a *App) answerDeadLetters(rootID string) func(any) {
	return func(m any) {
		ev, ok := m.(*actor.DeadLetterEvent)
		if !ok || ev.PID == nil || ev.PID.Id != rootID && !strings.HasPrefix(ev.PID.Id, rootID+"/") {
			return
		}
		var err error
		switch x := ev.Message.(type) {
		case *protocol.Subscribe:
			err = a.deadNode(rootID, ev.PID)
			select {
			case x.Done <- err:
			default:
			}
		case *protocol.Unsubscribe:
			select {
			case x.Done <- a.deadNode(rootID, ev.PID):
			default:
			}
		case *protocol.Publish:
			x.Answer(a.deadNode(rootID, ev.PID))
		case *protocol.Request:
			select {
			case x.Reply <- protocol.Reply{Err: a.deadNode(rootID, ev.PID)}:
			default:
			}
		case *protocol.Begin:
			select {
			case x.Reply <- protocol.BeginResult{Err: a.deadNode(rootID, ev.PID)}:
			default:
			}
		case *protocol.Drain:
			// A gone actor has nothing left to drain.
			select {
			case x.Done <- nil:
			default:
			}
		}
	}
}

// deadNode is the error of work sent to pid, an actor of the tree under
// the root rootID that is gone.
func (a *App) deadNode(rootID string, pid *actor.PID) error {
	path := strings.TrimPrefix(strings.TrimPrefix(pid.Id, rootID), "/")
	if path == "" {
		path = actors.RootNode.Path
	}
	// A node gone with the whole tree answers as every call does then: with
	// the connection's error. The tree may be stopping and not yet have told
	// the App (treeStopped), since the connection's children go first.
	if err := a.treeErr(); err != nil {
		return err
	}
	if a.stopCtx.Err() != nil {
		return &NodeError{Path: path, Err: ErrStopped} // the App's own Stop took it
	}
	return &NodeError{Path: path, Err: errors.New("its actor is gone")}
}

// treeErr is the error every call fails with once the App's tree has
// stopped or its connection has failed for good; nil while it runs.
func (a *App) treeErr() error {
	if g := a.gone.Load(); g != nil {
		return *g
	}
	if g := a.failing.Load(); g != nil {
		return *g
	}
	return nil
}

// goneNode draws a child whose actor protoactor knows no more: failed.
func goneNode(pid *actor.PID, why error) *Node {
	n := &Node{Name: pid.Id[strings.LastIndex(pid.Id, "/")+1:], PID: pid.String(), State: actors.StateFailed, LastError: why.Error()}
	n.SetActorPID(pid)
	return n
}
