package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/budget"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/transport"
)

// Env is what the App hands to every actor it spawns.
type Env struct {
	Log     *slog.Logger
	Dialect address.Dialect
	// Root sends from goroutines that are not actors (pumps, workers).
	Root *actor.RootContext
	// Backoff bounds re-attach and reconnect delays.
	Backoff Backoff
	// CloseTimeout bounds a link/session/connection close when the caller's
	// context has no deadline (go-amqp's Close can hang otherwise).
	CloseTimeout time.Duration
	// AttachTimeout bounds every dial, begin and attach by itself (see
	// AttachCtx); zero means DefaultAttachTimeout.
	AttachTimeout time.Duration
	// Base is the parent of every handler context (it carries the App for
	// Responder), so a handler's context costs nothing per delivery.
	Base context.Context
	// Mailboxes runs the mailboxes of every actor of the App (a Pool).
	Mailboxes actor.Dispatcher
	// MaxSenders bounds the dedicated sender links of a publisher, and
	// SenderIdle is how long a sender goes unused before it retires; zero
	// means the defaults of package session.
	MaxSenders int
	SenderIdle time.Duration
	// MaxSessions lowers the sessions the App puts on one connection below
	// the broker's figure (see connection.New); zero keeps the broker's.
	MaxSessions int
	// Supervisor decides for the failures of every actor under the
	// connection (WithSupervisorStrategy); nil means Supervisor().
	Supervisor actor.SupervisorStrategy
	// OnState takes every state change of a node (SetState). It is called
	// from the actor's Receive, so it must never block; nil drops them.
	OnState func(protocol.StateChange)
	// Budget bounds the bytes of deliveries every receiver of the App holds
	// and has credit out for (WithMaxInFlightBytes); nil bounds nothing.
	Budget *budget.Budget
	// Middleware wraps the Receive of every actor of the App; tests spy on
	// mailboxes with it. Nil adds nothing.
	Middleware []actor.ReceiverMiddleware
	// Holders is every receiver link of the App holding unsettled
	// deliveries (a deliver.Link adds itself when it starts and leaves when
	// its settler returns), for Tx.Accept to find the link of the message
	// it accepts.
	Holders Holders
	// IdleAfter is how long a partition's worker waits with nothing queued
	// before it ends (package dispatcher); zero means one second.
	IdleAfter time.Duration
	// LinkSettled is how long a link must stay attached before its end is
	// an ordinary detach again (Settled); zero means DefaultLinkSettled.
	LinkSettled time.Duration

	// gens numbers the links of every sender and receiver of the App (Gen).
	gens atomic.Uint64
	wg   sync.WaitGroup

	stopOnce, markOnce sync.Once
	stopped            chan struct{}
	// shards are closed with stopped: each publish waits on one of them
	// (StoppedShard), since every publisher of the App blocking on the one
	// channel contended for its lock.
	shards [8]chan struct{}
}

// Gen returns a number no link of the App has had before: a restarted
// sender's or receiver's first link must not share its generation with a
// link of its predecessor, whose goroutines may still report.
func (e *Env) Gen() uint64 { return e.gens.Add(1) }

// Stopped is closed once the App's actor tree has stopped: nothing will
// answer a Drain or an Unsubscribe after that, so whoever waits for one
// waits for this too.
func (e *Env) Stopped() <-chan struct{} {
	e.stopOnce.Do(e.makeStopped)
	return e.stopped
}

func (e *Env) makeStopped() {
	e.stopped = make(chan struct{})
	for i := range e.shards {
		e.shards[i] = make(chan struct{})
	}
}

// StoppedShard is closed when Stopped is; i picks one of several such
// channels, so that waiters spread over them.
func (e *Env) StoppedShard(i uint32) <-chan struct{} {
	e.stopOnce.Do(e.makeStopped)
	return e.shards[i%uint32(len(e.shards))]
}

// MarkStopped closes Stopped and every StoppedShard.
func (e *Env) MarkStopped() {
	e.Stopped()
	e.markOnce.Do(func() {
		close(e.stopped)
		for _, c := range e.shards {
			close(c)
		}
	})
}

// Props returns the props of an actor of the App, on the App's mailbox dispatcher (Mailboxes).
//
// Every actor supervises its children with the App's strategy (Supervisor,
// or the default of package actors), so one strategy decides at every level.
func (e *Env) Props(producer func() actor.Actor, opts ...actor.PropsOption) *actor.Props {
	if e.Mailboxes != nil {
		opts = append(opts, actor.WithDispatcher(e.Mailboxes))
	}
	if len(e.Middleware) > 0 {
		opts = append(opts, actor.WithReceiverMiddleware(e.Middleware...))
	}
	opts = append([]actor.PropsOption{actor.WithSupervisor(e.strategy()), actor.WithMailbox(newMailbox)}, opts...)
	return actor.PropsFromProducer(producer, opts...)
}

// strategy is the App's supervisor strategy: Supervisor, or the default.
func (e *Env) strategy() actor.SupervisorStrategy {
	if e != nil && e.Supervisor != nil {
		return e.Supervisor
	}
	return defaultSupervisor
}

// Go runs f in a goroutine the App waits for when it stops, so nothing an
// actor starts outlives the App.
func (e *Env) Go(f func()) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		f()
	}()
}

// Wait waits for every goroutine started with Go, or for ctx.
func (e *Env) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CloseCtx returns a context for a close call: ctx's own deadline when it has
// one, else CloseTimeout.
func (e *Env) CloseCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	d := e.CloseTimeout
	if d <= 0 {
		d = 5 * time.Second
	}
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// DefaultAttachTimeout is an attach's own bound: go-amqp's and the
// connectors' dial timeout. A broker recovering a quorum queue may take
// seconds to answer an attach; a close is quick or hopeless, so the close
// timeout is no bound for one.
const DefaultAttachTimeout = 30 * time.Second

// AttachCtx returns the context of a dial, begin or attach: caller's (the
// Start or Subscribe it is for; nil when the runtime attaches on its own)
// bounded also by AttachTimeout, whichever ends first. It is never bounded by
// CloseTimeout.
func (e *Env) AttachCtx(caller context.Context) (context.Context, context.CancelFunc) {
	if caller == nil {
		caller = context.Background()
	}
	d := e.AttachTimeout
	if d <= 0 {
		d = DefaultAttachTimeout
	}
	return context.WithTimeout(caller, d)
}

// Node names a node of the tree in its state changes: its path from the
// root as App.Tree names it (e.g. "connection/publisher/sender:orders"),
// its kind and its address.
type Node struct{ Path, Kind, Address string }

// Child returns the node named name under n.
func (n Node) Child(name, kind, addr string) Node {
	return Node{Path: n.Path + "/" + name, Kind: kind, Address: addr}
}

// RootNode is the connection actor's node, the root of every path.
var RootNode = Node{Path: "connection", Kind: "connection"}

// SubscriptionNode is the node of the subscription name (on addr).
func SubscriptionNode(name, addr string) Node {
	return RootNode.Child("subscription:"+name, "subscription", addr)
}

// SpecNode is the node of the subscription spec, under the connection that
// holds its session (SubscriptionSpec.ConnPath).
func SpecNode(spec *protocol.SubscriptionSpec) Node {
	if spec.ConnPath == "" {
		return SubscriptionNode(spec.Name, spec.Address.String())
	}
	return Node{Path: spec.ConnPath, Kind: "connection"}.Child("subscription:"+spec.Name, "subscription", spec.Address.String())
}

// SetState is the one way an actor changes the state of its node: it sets
// *state to to and, when that is a change, reports it (with err, why, when
// there is one) to OnState. It never blocks, so it is called from Receive;
// the changes of one node are reported in the order they happen.
func (e *Env) SetState(state *string, n Node, to string, err error) {
	from := *state
	if from == to {
		return
	}
	*state = to
	if e == nil || e.OnState == nil {
		return
	}
	e.OnState(protocol.StateChange{Path: n.Path, Kind: n.Kind, Address: n.Address,
		From: from, To: to, Err: err, At: time.Now()})
}

// Backoff is exponential backoff with full jitter. The zero value means
// 100 ms initial, 30 s max.
type Backoff struct {
	Initial, Max time.Duration
}

// Delay returns the wait before attempt n (n >= 1).
func (b Backoff) Delay(n int) time.Duration {
	initial, max := b.Initial, b.Max
	if initial <= 0 {
		initial = 100 * time.Millisecond
	}
	if max <= 0 {
		max = 30 * time.Second
	}
	d := initial
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	// Half fixed, half jitter: never zero, never in lock step with peers.
	return d/2 + rand.N(d/2+1)
}

// Longest is the longest wait Delay returns: Max, or its default.
func (b Backoff) Longest() time.Duration {
	if b.Max <= 0 {
		return 30 * time.Second
	}
	return b.Max
}

// After sends msg to pid after d, from a timer the caller owns and stops.
func (e *Env) After(d time.Duration, pid *actor.PID, msg any) *time.Timer {
	return time.AfterFunc(d, func() { e.Root.Send(pid, msg) })
}

// Supervisor is the strategy of every actor that has children: a child that
// panics is restarted, and one that keeps failing (10 times within a
// minute) is stopped so the failure reaches the tree instead of spinning.
// A link the broker detached is restarted too (see linkFailures).
func Supervisor() actor.SupervisorStrategy { return defaultSupervisor }

var defaultSupervisor = linkFailures{max: 10, within: time.Minute,
	SupervisorStrategy: actor.NewOneForOneStrategy(10, time.Minute, func(reason any) actor.Directive {
		return actor.RestartDirective
	})}

// linkFailures restarts an actor that failed because its link ended (a
// *transport.LinkError: the broker detached it), and the actor re-attaches
// with backoff. A link that had stayed attached for the settled period
// (Env.Settled) costs nothing: a broker may detach links as often as it
// likes. One that ended sooner (a *ShortLivedLink) spends the child's
// restart budget, as a panic does; past it the child is still restarted,
// since a new actor would meet the same broker, but it is told so
// (LinkDegraded): it re-attaches at the longest backoff and shows degraded
// until a link stays attached, so Ready says so and Health does not.
type linkFailures struct {
	actor.SupervisorStrategy
	max    int
	within time.Duration
}

func (s linkFailures) HandleFailure(sys *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason, msg any) {
	var le *transport.LinkError
	err, _ := reason.(error)
	if !errors.As(err, &le) {
		s.SupervisorStrategy.HandleFailure(sys, sup, child, rs, reason, msg)
		return
	}
	degraded := false
	var short *ShortLivedLink
	if errors.As(err, &short) {
		rs.Fail()
		if rs.NumberOfFailures(s.within) > s.max {
			// Counted afresh, so that the statistics stay small however
			// long the broker keeps detaching.
			rs.Reset()
			degraded = true
		}
	}
	sys.EventStream.Publish(&actor.SupervisorEvent{Child: child, Reason: reason, Directive: actor.RestartDirective})
	sup.RestartChildren(child)
	if degraded {
		// After the restart, which a system message orders first.
		sys.Root.Send(child, &LinkDegraded{Err: err})
	}
}

// DefaultLinkSettled is how long a link must stay attached for its end to
// count as an ordinary detach rather than as the broker refusing to keep it
// (Env.Settled).
const DefaultLinkSettled = 2 * time.Second

// Settled is LinkSettled, or DefaultLinkSettled when that is zero.
func (e *Env) Settled() time.Duration {
	if e.LinkSettled > 0 {
		return e.LinkSettled
	}
	return DefaultLinkSettled
}

// ShortLivedLink is why a link actor fails when its link ended within the
// settled period of its attach (Env.Settled): the broker keeps detaching
// it. It wraps the link's error, so errors.As finds the
// *transport.LinkError in it.
type ShortLivedLink struct {
	Err *transport.LinkError
	// Up is how long the link was attached.
	Up time.Duration
}

func (e *ShortLivedLink) Error() string {
	return fmt.Sprintf("%v (%s after it attached)", e.Err, e.Up.Round(time.Millisecond))
}

func (e *ShortLivedLink) Unwrap() error { return e.Err }

// LinkDegraded tells a link actor that its short-lived links spent its
// restart budget (see Supervisor): it re-attaches at the longest backoff
// and reports degraded until a link stays attached for the settled period.
type LinkDegraded struct{ Err error }

// UserStrategy wraps the strategy a user gives WithSupervisorStrategy so that
// every directive it may return leaves the tree working or reporting:
//
//   - Escalate from a connection actor goes nowhere in protoactor (the
//     connection's own supervisor resumes it, and the child that escalated
//     stays suspended): there the child is stopped instead, which its
//     connection reports (a failed subscription; the publisher, requests and
//     txn actors are started again).
//   - Resuming an actor that escalated a child's failure resumes that child
//     too: protoactor suspended both, and resumes only the one it is asked
//     to.
//
// Restart and Stop, one-for-one or all-for-one, are protoactor's own.
func UserStrategy(s actor.SupervisorStrategy) actor.SupervisorStrategy {
	if s == nil {
		return nil
	}
	if u, ok := s.(*userStrategy); ok {
		return u
	}
	return &userStrategy{user: s}
}

type userStrategy struct {
	user actor.SupervisorStrategy
	// escalated maps the PID of an actor that escalated (suspended, and
	// waiting for its parent's decision) to the child whose failure it
	// escalated. Written and read by the strategy, which the mailbox runs
	// of many actors call: hence the map's own lock.
	escalated sync.Map
}

func (s *userStrategy) HandleFailure(sys *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason, msg any) {
	s.user.HandleFailure(sys, &directed{Supervisor: sup, s: s, sys: sys, child: child, reason: reason}, child, rs, reason, msg)
}

// directed is the supervisor the user's strategy acts on: sup, with the
// directives completed as UserStrategy says.
type directed struct {
	actor.Supervisor
	s      *userStrategy
	sys    *actor.ActorSystem
	child  *actor.PID
	reason any
}

func (d *directed) EscalateFailure(reason, msg any) {
	self := supervisorPID(d.Supervisor)
	if self != nil && IsConnection(self) {
		d.sys.EventStream.Publish(&actor.SupervisorEvent{Child: d.child, Reason: reason, Directive: actor.StopDirective})
		d.Supervisor.StopChildren(d.child)
		return
	}
	if self != nil {
		d.s.escalated.Store(self.String(), d.child)
	}
	d.Supervisor.EscalateFailure(reason, msg)
}

func (d *directed) ResumeChildren(pids ...*actor.PID) {
	d.Supervisor.ResumeChildren(pids...)
	for _, pid := range pids {
		// Down the chain of actors that escalated, each resumed in turn.
		for {
			c, ok := d.s.escalated.LoadAndDelete(pid.String())
			if !ok {
				break
			}
			pid = c.(*actor.PID)
			d.Supervisor.ResumeChildren(pid)
		}
	}
}

func (d *directed) RestartChildren(pids ...*actor.PID) {
	d.forget(pids)
	d.Supervisor.RestartChildren(pids...)
}

func (d *directed) StopChildren(pids ...*actor.PID) {
	d.forget(pids)
	d.Supervisor.StopChildren(pids...)
}

// forget drops what pids escalated, down the chain: a restart or a stop
// takes their children with them.
func (d *directed) forget(pids []*actor.PID) {
	for _, pid := range pids {
		for {
			c, ok := d.s.escalated.LoadAndDelete(pid.String())
			if !ok {
				break
			}
			pid = c.(*actor.PID)
		}
	}
}

// supervisorPID is the PID of the actor whose strategy decides: protoactor
// passes its context.
func supervisorPID(sup actor.Supervisor) *actor.PID {
	if c, ok := sup.(interface{ Self() *actor.PID }); ok {
		return c.Self()
	}
	return nil
}

// IsConnection reports whether pid is a connection actor of an App (the
// first, "connection", or one of its pool, "connection-N"): the top of the
// actors the App's strategy decides for, since its own supervisor resumes
// it whatever its children escalate.
func IsConnection(pid *actor.PID) bool {
	name := pid.Id[strings.LastIndex(pid.Id, "/")+1:]
	return name == "connection" || strings.HasPrefix(name, "connection-")
}

// DrainAll sends a drain like d (its contexts, not its Done) to each pid
// and waits until all have answered or d.Ctx ends. A pid that stops before
// it answers counts as drained: protoactor drops what a stopping actor's
// mailbox still holds (no dead letter either), and a stopped actor has
// ended its links. It blocks: call it from a goroutine, never from Receive.
func (e *Env) DrainAll(d *protocol.Drain, pids []*actor.PID) error {
	gone, unwatch := e.watch(pids)
	defer unwatch()
	chans := make([]chan error, len(pids))
	for i, pid := range pids {
		chans[i] = make(chan error, 1)
		e.Root.Send(pid, &protocol.Drain{Ctx: d.Ctx, Graceful: d.Graceful, Done: chans[i]})
	}
	var errs []error
	for i, ch := range chans {
		select {
		case err := <-ch:
			errs = append(errs, err)
		case <-gone[i]:
		case <-d.Ctx.Done():
			return d.Ctx.Err()
		case <-e.Stopped():
			return protocol.ErrStopped
		}
	}
	return errors.Join(errs...)
}

// watch returns a channel per pid that is closed once that actor has
// stopped (at once for one already gone), and the func that ends the
// watch.
func (e *Env) watch(pids []*actor.PID) ([]chan struct{}, func()) {
	gone := make([]chan struct{}, len(pids))
	for i := range gone {
		gone[i] = make(chan struct{})
	}
	// The watcher's fields are ONLY touched by its mailbox run.
	closed := make([]bool, len(pids))
	w := e.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *actor.Started:
			for _, pid := range pids {
				c.Watch(pid)
			}
		case *actor.Terminated:
			for i, pid := range pids {
				if !closed[i] && pid.Equal(m.Who) {
					closed[i] = true
					close(gone[i])
				}
			}
		case *actor.Stopping:
			for i, pid := range pids {
				if !closed[i] {
					c.Unwatch(pid)
				}
			}
		}
	}))
	return gone, func() { e.Root.Stop(w) }
}

// StateFailed is the state of a node that gave up: a terminal error
// (authentication refused, attach refused with amqp:unauthorized-access or
// amqp:not-found) came back TerminalRetries times in a row. It stays failed
// until the connection is re-established (a failed receiver) or the App is
// restarted (a failed connection); LastError says why.
const StateFailed = "failed"

// TerminalRetries is how many times a terminal error is retried, each after
// the longest backoff (Backoff.Max), before the node goes to StateFailed.
// A deleted queue that an operator re-creates within that window is picked
// up again; credentials that stay wrong are not tried forever.
const TerminalRetries = 3

// EscalateAfter is how many re-attaches of a receiver may fail in a row
// (transient errors) before it escalates to its subscription, which replaces
// the session and the receiver.
const EscalateAfter = 5

// Terminal reports an error that retrying will not cure: the broker refused
// the credentials (a connect error that says Terminal), or refused an attach
// with amqp:unauthorized-access or amqp:not-found.
func Terminal(err error) bool {
	if err == nil {
		return false
	}
	var t interface{ Terminal() bool }
	if errors.As(err, &t) && t.Terminal() {
		return true
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Condition {
		case amqp.ErrCondUnauthorizedAccess, amqp.ErrCondNotFound:
			return true
		}
	}
	return false
}

// Refused reports an error that carries the broker's own condition (an
// *amqp.Error) for the call: the broker answered and said no. RabbitMQ 4
// refuses an attach by ending its session with the condition, so a session
// ended with one counts; a connection the broker ended (a connection:forced
// as it shuts down) is lost, not a refusal, and so is anything else (a
// timeout): transient.
func Refused(err error) bool {
	var ce *amqp.ConnError
	if errors.As(err, &ce) {
		return false
	}
	var ae *amqp.Error
	return errors.As(err, &ae)
}

// LinkGone reports an error that says the link (or its session or
// connection) has ended, as opposed to the caller's context ending.
func LinkGone(err error) bool {
	var le *amqp.LinkError
	var se *amqp.SessionError
	var ce *amqp.ConnError
	return errors.As(err, &le) || errors.As(err, &se) || errors.As(err, &ce)
}

// Holders is a set of the App's links that hold deliveries. The zero value
// is empty and ready to use.
type Holders struct {
	mu  sync.Mutex
	set map[any]struct{}
}

// Add puts h in the set.
func (s *Holders) Add(h any) {
	s.mu.Lock()
	if s.set == nil {
		s.set = map[any]struct{}{}
	}
	s.set[h] = struct{}{}
	s.mu.Unlock()
}

// Remove takes h out of the set.
func (s *Holders) Remove(h any) {
	s.mu.Lock()
	delete(s.set, h)
	s.mu.Unlock()
}

// Range calls f for each member, with the set locked, until f returns
// false.
func (s *Holders) Range(f func(h any) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for h := range s.set {
		if !f(h) {
			return
		}
	}
}
