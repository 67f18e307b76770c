// Package connection owns the root of an App's actor tree: it dials the
// connector, tells every child when the connection is up or down, reconnects
// with backoff when it is lost, and orchestrates the graceful stop.
//
// A connection holds only so many sessions (the broker's channel-max), and
// every subscription has one: the first connection actor spreads them over
// a pool of connection actors it spawns as it needs them (connection-2,
// connection-3, ...), each dialling, watching, reconnecting and draining
// its own connection for the subscriptions it holds. The publisher,
// requests and txn actors stay on the first.
//
// A connection actor that panics is resumed, and the message it panicked
// on is lost; after resuming it reconciles (reconcile): a connection whose
// Done channel is closed is treated as lost, a dial whose answer it was
// handling is redone, and with neither a connection nor a dial it dials.
// Reconciling was chosen over moving dialling and watching into a child
// restarted on its own: the connection must come back to this actor
// anyway (it tells the children, places subscriptions, answers Start), so
// a panic while adopting it would leave the same half-done state here; and
// what a handler can leave half-done is small and fully known from the
// actor's own fields and the connection's Done channel. Its handlers change
// those fields in an order that keeps them reconcilable: a lost
// connection is let go of last, a dial is marked done last.
package connection

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/session"
	"github.com/amqpactor/amqpactor/actors/txn"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/transport"
)

// Children are the well-known children of a connection, known at spawn so
// the App can send to them directly.
type Children struct {
	Publisher, Requests, Txn *actor.PID
	// Replies is the requests actor's book, for callers to register in.
	Replies *session.Replies
	// Senders is the publishers' table, for callers to hand publishes by.
	Senders *session.Senders
}

// Started answers the first dial: the children once it succeeded.
type Started struct {
	Children Children
	Err      error
}

// New returns the props of the App's root actor; started receives the
// result of the first dial.
//
// The root spawns the connection actor and forwards to it; the connection
// actor spawns, and its strategy (the App's) decides for, the publisher,
// the requests and txn actors and every subscription, so the tree App.Tree
// draws is protoactor's. The connection actor itself is never restarted:
// protoactor stops an actor's children when it restarts it, and its
// children are every session and link of the App. The root resumes it
// after a panic instead (resumer), and stops it past the restart budget,
// which ends the App's tree: the connection's node turns failed with a
// protocol.NodeError (the App, which watches the root, fails every call at
// once from then on). Starting a new connection actor instead would
// rebuild nothing: every session and link went with the old one. The root
// holds no connection and never blocks.
//
// The root's own failures are decided by the App's strategy (Env.Supervisor,
// or the default), not by whatever supervises the root (protoactor's
// default, from the root context, or the actor of App.Props), which would
// restart it and so stop the whole tree: the root recovers its own panic and
// asks the App's strategy, as a parent would, what to do with it. Restart
// and Resume both resume it (a restart would stop every session and link;
// the root's state is one PID, which it reconciles), so a strategy's
// restart budget still counts the root's panics and, once spent, answers
// Stop. Stop, and Escalate (nothing is above the root that the App's
// strategy decides for), end the App's tree as a connection actor past its
// budget does: the connection's node turns failed with a
// protocol.NodeError naming why, Health says so and every call fails at
// once. Under App.Props the actor that owns the App then sees its child
// stop and fails to its own supervisor.
//
// The connections of the pool are children of the connection actor, and
// protoactor asks a parent's strategy about its children: the connection
// actor's (pool) resumes them as the root resumes it, and hands every other
// child's failure to the App's strategy.
func New(env *actors.Env, c transport.Connector, started chan<- Started) *actor.Props {
	budget := resumer{max: 10, within: time.Minute}
	own := env.Supervisor
	if own == nil {
		own = actors.Supervisor()
	}
	return env.Props(func() actor.Actor {
		return &root{env: env, connector: c, started: started, budget: budget, own: own, stats: actor.NewRestartStatistics()}
	}, actor.WithSupervisor(budget))
}

// resumer supervises the connection actor (see New): a panic resumes it,
// the message it panicked on lost, within max failures in within; past
// that it is stopped. protoactor's SupervisorEvent reports each decision.
type resumer struct {
	max    int
	within time.Duration
}

// pool is the connection actor's strategy (see New).
type pool struct {
	members resumer
	other   actor.SupervisorStrategy
}

func (s pool) HandleFailure(sys *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason, msg any) {
	if isMember(child) {
		s.members.HandleFailure(sys, sup, child, rs, reason, msg)
		return
	}
	s.other.HandleFailure(sys, sup, child, rs, reason, msg)
}

// memberPrefix begins the name of every connection of the pool but the
// first; the first's actor spawns them, so they are its children.
const memberPrefix = "connection-"

func isMember(pid *actor.PID) bool {
	return strings.HasPrefix(pid.Id[strings.LastIndex(pid.Id, "/")+1:], memberPrefix)
}

func (s resumer) HandleFailure(sys *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason, _ any) {
	rs.Fail()
	if rs.NumberOfFailures(s.within) > s.max {
		sys.EventStream.Publish(&actor.SupervisorEvent{Child: child, Reason: reason, Directive: actor.StopDirective})
		sup.StopChildren(child)
		return
	}
	sys.EventStream.Publish(&actor.SupervisorEvent{Child: child, Reason: reason, Directive: actor.ResumeDirective})
	sup.ResumeChildren(child)
	sys.Root.Send(child, &resumed{reason: reason})
}

// Adopt asks the first connection actor to spawn an actor of the App's
// own (App.Publisher's) as its child, named Name, from Props: the App's
// strategy decides its failures, the tree draws it, a drain reaches it with
// the subscriptions (before the publisher it publishes through), and one
// its supervisor stops is started again under its name within a restart
// budget, past which its node turns failed. Adopted is called on the
// connection actor's goroutine with its PID, or why it was not spawned:
// it must not block.
type Adopt struct {
	Name    string
	Props   func() *actor.Props
	Adopted func(pid *actor.PID, err error)
}

// root is the App's root actor (see New). Its fields are its own: only its
// Receive reads and writes them.
type root struct {
	env       *actors.Env
	connector transport.Connector
	started   chan<- Started
	conn      *actor.PID // the connection actor
	stopping  bool
	budget    resumer // the connection actor's supervisor
	// own decides the root's own failures (the App's strategy), counted
	// in stats; panics are those it resumed after.
	own    actor.SupervisorStrategy
	stats  *actor.RestartStatistics
	panics int
	// drain is a Drain taken and not yet forwarded: a panic between the
	// two leaves it for reconcile.
	drain *protocol.Drain
	// failure is why the root ends the tree (its strategy said Stop or
	// Escalate): once the connection actor has stopped, the connection's
	// node turns failed with it and the root stops.
	failure error
}

// rootResumed tells the root, after it recovered from a panic that its
// strategy resumed (or restarted), to reconcile.
type rootResumed struct{}

// rootPanics tells the connection actor how many panics the root resumed
// after, for its node's counters (the tree is drawn from it).
type rootPanics struct{ n int }

func (r *root) Receive(ctx actor.Context) {
	defer func() {
		if reason := recover(); reason != nil {
			r.failed(ctx, reason)
		}
	}()
	r.receive(ctx)
}

func (r *root) receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.conn = spawn(ctx, newConnection(r.env, r.connector, r.started), "connection")
	case *testhook.CrashRoot:
		panic("amqpactor: root: " + m.Reason)
	case *rootResumed:
		r.reconcile(ctx)
	case *protocol.Drain:
		r.stopping = true
		r.drain = m
		ctx.Forward(r.conn)
		r.drain = nil
	case *actor.Terminated:
		if m.Who.Equal(r.conn) {
			r.connGone(ctx)
		}
	case *actor.Stopping, *actor.Stopped, *actor.Restarting, *actor.ReceiveTimeout:
	default:
		// Subscribe, Describe, Pause, Resume, Unsubscribe: the connection
		// actor's, with the sender kept for its answer.
		ctx.Forward(r.conn)
	}
}

// connGone handles the end of the connection actor: the App's own stop,
// the root failing on its strategy's word, or the connection actor's
// supervisor giving up on it (it kept panicking). Without it nothing
// reconnects, so the App's tree ends here: the connection's node turns
// failed (App.Health names it) and the App, which watches this actor,
// fails every call at once (every session and link went with the
// connection actor, so starting a new one would rebuild nothing).
func (r *root) connGone(ctx actor.Context) {
	if r.stopping {
		return
	}
	err := r.failure
	if err == nil {
		err = &protocol.NodeError{Path: actors.RootNode.Path, Kind: "connection", Address: r.connector.String(),
			Err: fmt.Errorf("the connection actor was stopped by its supervisor after more than %d panics in %s", r.budget.max, r.budget.within)}
	}
	r.env.Log.Error("amqpactor: the connection actor stopped; stopping the App's tree", "connector", r.connector.String(), "error", err)
	state := protocol.StateStopped
	n := actors.RootNode
	n.Address = r.connector.String()
	r.env.SetState(&state, n, actors.StateFailed, err)
	r.stopping = true
	ctx.Stop(ctx.Self())
}

// failed asks the App's strategy what to do about the root's panic (see
// New) and does it. It runs in the deferred recover of Receive: it must not
// panic itself, so what may (spawning) is left to rootResumed.
func (r *root) failed(ctx actor.Context, reason any) {
	switch ctx.Message().(type) {
	case *actor.Stopping, *actor.Stopped:
		r.env.Log.Error("amqpactor: the App's root actor panicked while stopping", "connector", r.connector.String(), "reason", fmt.Sprint(reason))
		return
	}
	v := &verdict{self: ctx.Self()}
	if !r.stopping {
		r.own.HandleFailure(ctx.ActorSystem(), v, ctx.Self(), r.stats, reason, ctx.Message())
	}
	// While the App stops, the root is resumed whatever the strategy
	// says: the drain under way ends the tree anyway, and must be answered.
	if r.stopping || v.directive == actor.ResumeDirective || v.directive == actor.RestartDirective {
		r.panics++
		r.env.Log.Warn("amqpactor: the App's root actor panicked and was resumed", "connector", r.connector.String(),
			"reason", fmt.Sprint(reason), "directive", v.directive.String())
		ctx.Send(ctx.Self(), &rootResumed{})
		return
	}
	r.failure = &protocol.NodeError{Path: actors.RootNode.Path, Kind: "connection", Address: r.connector.String(),
		Err: fmt.Errorf("the App's root actor panicked (%v) and its supervisor strategy said %s", reason, v.directive)}
	r.env.Log.Error("amqpactor: the App's root actor failed; stopping the App's tree", "connector", r.connector.String(), "error", r.failure)
	if r.conn == nil {
		r.connGone(ctx)
		return
	}
	ctx.Stop(r.conn)
}

// reconcile finishes what the message the root panicked on left undone:
// the connection actor spawned, a drain forwarded, the end of the
// connection actor handled; and tells the connection actor its count.
func (r *root) reconcile(ctx actor.Context) {
	if r.drain != nil {
		d := r.drain
		r.drain = nil
		ctx.Send(r.conn, d)
	}
	switch {
	case r.conn == nil && !r.stopping:
		r.conn = spawn(ctx, newConnection(r.env, r.connector, r.started), "connection")
	case r.conn != nil:
		if _, alive := ctx.ActorSystem().ProcessRegistry.GetLocal(r.conn.Id); !alive {
			r.connGone(ctx)
			return
		}
	}
	if r.conn != nil {
		ctx.Send(r.conn, &rootPanics{n: r.panics})
	}
}

// verdict is the supervisor the App's strategy acts on for the root: it
// records the directive instead of carrying it out.
type verdict struct {
	self      *actor.PID
	directive actor.Directive
}

func (v *verdict) Children() []*actor.PID        { return []*actor.PID{v.self} }
func (v *verdict) EscalateFailure(any, any)      { v.directive = actor.EscalateDirective }
func (v *verdict) RestartChildren(...*actor.PID) { v.directive = actor.RestartDirective }
func (v *verdict) StopChildren(...*actor.PID)    { v.directive = actor.StopDirective }
func (v *verdict) ResumeChildren(...*actor.PID)  { v.directive = actor.ResumeDirective }

type (
	dialed struct {
		attempt int
		h       *handoff
		err     error
	}
	lost struct {
		conn transport.Conn
		err  error
	}
	redial       struct{ attempt int }
	unsubscribed struct {
		name string
		done chan<- error
		err  error
	}
	closed struct{}
	// resumed: the root resumed the connection actor after a panic.
	resumed struct{ reason any }
	// released: a connection of the pool holds the subscription name no
	// more (it was unsubscribed, failed for good, or never attached).
	released struct{ name string }
)

// newConnection returns the props of the connection actor.
//
// A connection actor that panics is resumed by the root (see New); the
// message it panicked on is lost. Should a strategy restart it instead, on
// Restarting the dying incarnation stops its timer, gives up a dial under
// way and ends its watcher, and the next incarnation keeps the connection
// and the counters and watches the connection again, or dials.
func newConnection(env *actors.Env, c transport.Connector, started chan<- Started) *actor.Props {
	k := &kept{env: env, connector: c, started: started, subs: map[string]*actor.PID{},
		name: "connection", node: actors.RootNode, placed: map[string]*member{}}
	other := env.Supervisor
	if other == nil {
		other = actors.Supervisor()
	}
	return env.Props(func() actor.Actor { return &connection{kept: k} },
		actor.WithSupervisor(pool{members: resumer{max: 10, within: time.Minute}, other: other}))
}

// newMember returns the props of a connection of the pool, named name: it
// holds subscriptions only, and its first dial answers no Start.
func newMember(env *actors.Env, c transport.Connector, name string) *actor.Props {
	k := &kept{env: env, connector: c, subs: map[string]*actor.PID{}, name: name,
		node: actors.RootNode.Child(name, "connection", c.String()), isMember: true}
	return env.Props(func() actor.Actor { return &connection{kept: k} })
}

// member is the first connection's record of a connection of its pool.
type member struct {
	pid  *actor.PID
	name string
	subs int // subscriptions placed on it and not released
}

// reserved are the sessions the first connection keeps for the publisher
// (and its replies publisher), requests, the management link and a few
// transactions; spare are those every other connection keeps free for its
// management link (RabbitMQ 4 declares queues through it) and a session
// being replaced while its predecessor ends: go-amqp closes the whole
// connection when a session is begun past the channel-max.
const (
	reserved = 8
	spare    = 3
)

// DefaultMaxSessions is the sessions a connection is planned with when the
// broker does not say: RabbitMQ 4's channel-max.
const DefaultMaxSessions = 64

// sessionLimit is the sessions the App plans on conn: the broker's figure
// (transport.SessionLimit), or DefaultMaxSessions, lowered to opt.
func sessionLimit(conn transport.Conn, opt int) int {
	n := 0
	if sl, ok := conn.(transport.SessionLimit); ok {
		n = sl.MaxSessions()
	}
	if n <= 0 {
		n = DefaultMaxSessions
	}
	if opt > 0 && opt < n {
		n = opt
	}
	return n
}

// kept is what the connection actor's incarnations share; only its
// mailbox run writes it (Restarting, then the next incarnation's Started).
type kept struct {
	env       *actors.Env
	connector transport.Connector
	started   chan<- Started
	name      string      // "connection", or a pool member's "connection-N"
	node      actors.Node // its node in state changes
	isMember  bool        // a connection of the pool: subscriptions only
	children  Children
	subs      map[string]*actor.PID
	subOrder  []string
	// failed are the subscriptions their supervisor gave up on, by name:
	// the tree keeps showing them, failed, until the App stops.
	failed  map[string]*protocol.Node
	subAddr map[string]string // each subscription's address, for its failed node

	conn     transport.Conn
	state    string
	lastErr  error
	restarts int // connections lost
	panics   int
	// rootPanics are the panics the root resumed after, as it last said.
	rootPanics int
	terminal   int // terminal dial errors in a row (credentials refused)
	stopping   bool
	// connectedAt is when the current connection came up.
	connectedAt time.Time
	// broker is what the last connection's peer called itself (shown by
	// the node while it reconnects, too).
	broker string

	// limit is the sessions planned per connection, learnt from the first
	// connection made (zero before).
	limit int
	// The first connection's pool: its members in order, the member of
	// each subscription placed on one, and the next member's number.
	members []*member
	placed  map[string]*member
	next    int
	// pending are a member's Subscribes that came before its first
	// connection: they attach on it, or fail with its dial's error.
	pending []*protocol.Subscribe
	everUp  bool
	// again is the budget for starting the publisher, requests and txn
	// actors again, by name.
	again map[string]*actors.Restarts
	// gaveUp are those of them past that budget, by name, drawn failed.
	gaveUp map[string]*protocol.Node
	// adopted are the actors of the App's own it spawned (Adopt), in
	// order; again and gaveUp count them too.
	adopted []*adoptee
}

// adoptee is an actor of the App's own, a child of the connection actor.
type adoptee struct {
	name  string
	pid   *actor.PID
	props func() *actor.Props
}

// connection is one incarnation: what it holds besides kept belongs to
// goroutines and timers of its own.
type connection struct {
	*kept
	cancel  context.CancelFunc // ends the watcher
	dialing *handoff           // the dial in progress, if any
	timer   *time.Timer
}

func (c *connection) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if c.children.Publisher == nil && !c.isMember {
			ch := Children{Senders: session.NewSenders(), Replies: session.NewReplies()}
			ch.Publisher = spawn(ctx, session.NewPublisher(c.env, ch.Senders), "publisher")
			ch.Requests = spawn(ctx, session.NewRequests(c.env, ch.Replies), "requests")
			ch.Txn = spawn(ctx, txn.New(c.env, c.connector.String()), "txn")
			c.children = ch
		}
		switch {
		case c.conn != nil:
			// Restarted on a live connection: watch it again.
			c.set(protocol.StateAttached, nil)
			c.watch(ctx, c.conn)
		case !c.stopping:
			c.dial(ctx, 1)
		}
	case *actor.Restarting:
		c.panics++
		c.let()
		c.set(protocol.StateRestarting, nil)
	case *rootPanics:
		c.rootPanics = m.n
	case *Adopt:
		c.adopt(ctx, m)
	case *resumed:
		c.panics++
		c.reconcile(ctx)
		c.env.Log.Warn("amqpactor: the connection actor panicked and was resumed", "connector", c.connector.String(),
			"reason", fmt.Sprint(m.reason))
	case *testhook.Crash:
		panic("amqpactor: connection: " + m.Reason)
	case *protocol.Subscribe:
		c.subscribe(ctx, m)
	case *actor.Terminated:
		c.childGone(ctx, m.Who)
	case *dialed:
		c.onDialed(ctx, m)
	case *lost:
		c.onLost(ctx, m)
	case *protocol.Reconnect:
		// Escalated by a child whose new sessions keep failing. Closing
		// the connection takes the ordinary lost-connection path: every
		// child hears ConnDown, then ConnUp on a fresh connection. At
		// most once per connection, and not on one that is brand new.
		if c.conn == nil || c.stopping || time.Since(c.connectedAt) < 2*time.Second {
			return
		}
		c.env.Log.Warn("amqpactor: reconnecting on a child's request", "connector", c.connector.String(), "error", m.Err)
		conn, env := c.conn, c.env
		c.connectedAt = time.Now() // one escalation per connection
		env.Go(func() {
			cctx, cancel := env.CloseCtx(context.Background())
			defer cancel()
			_ = conn.Close(cctx)
		})
	case *redial:
		c.timer = nil
		// A resume during the backoff dials at once and stops the timer,
		// which may have fired already: its redial then finds that dial
		// under way and leaves it be (seed 528 of test/chaos).
		if !c.stopping && c.conn == nil && c.dialing == nil {
			c.dial(ctx, m.attempt)
		}
	case *protocol.Unsubscribe:
		c.unsubscribe(ctx, m)
	case *unsubscribed:
		if pid, ok := c.subs[m.name]; ok {
			ctx.Stop(pid)
			delete(c.subs, m.name)
			for i, n := range c.subOrder {
				if n == m.name {
					c.subOrder = append(c.subOrder[:i], c.subOrder[i+1:]...)
					break
				}
			}
			c.release(ctx, m.name)
		}
		m.done <- m.err
	case *released:
		if mb, ok := c.placed[m.name]; ok {
			delete(c.placed, m.name)
			mb.subs--
		}
	case *protocol.Pause, *protocol.Resume:
		name := ""
		if p, ok := m.(*protocol.Pause); ok {
			name = p.Name
		} else {
			name = m.(*protocol.Resume).Name
		}
		if pid, ok := c.subs[name]; ok {
			ctx.Send(pid, m)
		} else if mb, ok := c.placed[name]; ok {
			ctx.Send(mb.pid, m)
		}
	case *protocol.Drain:
		c.drain(ctx, m)
	case *closed:
		c.set(protocol.StateDetached, nil)
	case *actor.Stopped:
		c.set(protocol.StateStopped, nil)
	case *protocol.Describe:
		ctx.Respond(c.describe(ctx))
	case *actor.Stopping:
		c.stopping = true
		c.let()
		if c.conn != nil {
			conn, env := c.conn, c.env
			c.conn = nil
			env.Go(func() {
				cctx, cancel := env.CloseCtx(context.Background())
				defer cancel()
				_ = conn.Close(cctx)
			})
		}
		if c.started != nil {
			c.started <- Started{Err: protocol.ErrStopped}
			c.started = nil
		}
		c.failPending(ctx, protocol.ErrStopped)
	}
}

func spawn(ctx actor.Context, props *actor.Props, name string) *actor.PID {
	pid, err := ctx.SpawnNamed(props, name)
	if err != nil {
		panic(fmt.Errorf("amqpactor: spawning %s: %w", name, err))
	}
	return pid
}

// panicAt, when set (tests only), is called at the fault points of the
// handlers that change the connection (onLost, onDialed), so a test can
// crash the actor half-way through one and see it reconcile.
var panicAt atomic.Pointer[func(point string)]

func faultPoint(point string) {
	if f := panicAt.Load(); f != nil {
		(*f)(point)
	}
}

// handoff passes a dialled connection from the dialling goroutine to the
// actor. The actor may give up on a dial (the App stops, or a Start ends)
// before its answer is read from the mailbox, and an answer in the mailbox
// of a stopped actor is never read: so the connection waits here, and
// whichever side comes second closes it when the actor has given up.
type handoff struct {
	mu        sync.Mutex
	abandoned bool
	conn      transport.Conn
	cancel    context.CancelFunc
	// taken is what take returned and answered whether take ran: the
	// actor's own (written and read in its Receive), so that reconcile
	// can finish a dial whose answer a panic cut short.
	taken    transport.Conn
	answered bool
}

// wasTaken reports whether the actor took the dial's answer.
func (h *handoff) wasTaken() bool { return h.answered }

// give leaves conn for the actor; false means the actor gave up on it, and
// the caller closes it.
func (h *handoff) give(conn transport.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.abandoned {
		return false
	}
	h.conn = conn
	return true
}

// take returns the connection left by give (nil when abandoned since).
func (h *handoff) take() transport.Conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	conn := h.conn
	h.conn, h.abandoned = nil, true
	return conn
}

// abandon gives up on the dial: it is cancelled, and a connection already
// given but not taken is returned, for the caller to close.
func (h *handoff) abandon() transport.Conn {
	h.mu.Lock()
	conn := h.conn
	h.conn, h.abandoned = nil, true
	h.mu.Unlock()
	h.cancel()
	return conn
}

func (c *connection) dial(ctx actor.Context, attempt int) {
	c.set(protocol.StateAttaching, nil)
	self, connector, env := ctx.Self(), c.connector, c.env
	dctx, cancel := env.AttachCtx(nil)
	h := &handoff{cancel: cancel}
	c.dialing = h
	env.Go(func() {
		defer cancel()
		conn, err := connector.Connect(dctx)
		if conn != nil && !h.give(conn) {
			closeConn(env, conn)
			return
		}
		env.Root.Send(self, &dialed{attempt: attempt, h: h, err: err})
	})
}

// abandonDial gives up on a dial in progress; a connection it made is closed.
func (c *connection) abandonDial() {
	if c.dialing == nil {
		return
	}
	if conn := c.dialing.abandon(); conn != nil {
		closeConn(c.env, conn)
	}
	if t := c.dialing.taken; t != nil && t != c.conn {
		// Taken by a handler a panic cut short, never adopted.
		closeConn(c.env, t)
	}
	c.dialing = nil
}

func closeConn(env *actors.Env, conn transport.Conn) {
	env.Go(func() {
		cctx, cancel := env.CloseCtx(context.Background())
		defer cancel()
		_ = conn.Close(cctx)
	})
}

func (c *connection) onDialed(ctx actor.Context, m *dialed) {
	conn := m.h.take()
	m.h.taken, m.h.answered = conn, true
	if m.err == nil && conn == nil {
		if c.dialing == m.h {
			c.dialing = nil
		}
		return // given up on (abandonDial closed it)
	}
	if m.err != nil {
		if c.dialing == m.h {
			c.dialing = nil
		}
		c.lastErr = m.err
		if c.stopping && c.started != nil {
			c.started <- Started{Err: fmt.Errorf("%w: %w", protocol.ErrStopped, m.err)}
			c.started = nil
			return
		}
		if c.started != nil {
			// The first dial decides Start; the App gives up on us.
			c.started <- Started{Err: m.err}
			c.started = nil
			c.set(protocol.StateDetached, m.err)
			return
		}
		// So does a pool member's for the Subscribes that made it: the
		// member itself goes on dialling for those to come.
		c.failPending(ctx, fmt.Errorf("amqpactor: connecting to %s (%s): %w", c.connector, c.name, m.err))
		delay := c.env.Backoff.Delay(m.attempt + 1)
		if actors.Terminal(m.err) {
			// Refused credentials are not retried forever: a few times
			// after the longest backoff (a broker still booting may
			// refuse them), then the connection is failed for good.
			c.terminal++
			if c.terminal > actors.TerminalRetries {
				c.set(actors.StateFailed, m.err)
				c.env.Log.Error("amqpactor: giving up reconnecting", "connector", c.connector.String(),
					"attempts", m.attempt, "error", m.err)
				return
			}
			delay = c.env.Backoff.Delay(1 << 20)
		}
		c.env.Log.Warn("amqpactor: reconnect failed", "connector", c.connector.String(), "attempt", m.attempt, "error", m.err)
		c.set(protocol.StateRestarting, m.err)
		c.timer = c.env.After(delay, ctx.Self(), &redial{attempt: m.attempt + 1})
		return
	}
	c.terminal = 0
	if c.stopping || c.conn != nil {
		// Stopping, or a raced dial's answer while a connection is live:
		// adopting it would orphan the live one and its watcher.
		if c.dialing == m.h {
			c.dialing = nil
		}
		closeConn(c.env, conn)
		return
	}
	faultPoint("dialed:taken")
	c.conn = conn
	c.connectedAt = time.Now()
	c.broker = conn.Features().Broker
	if c.limit == 0 {
		// Learnt once: the first connection places every subscription of
		// the pool by its own figure, all being to the same broker.
		c.limit = sessionLimit(conn, c.env.MaxSessions)
	}
	c.set(protocol.StateAttached, nil)
	c.watch(ctx, conn)
	up := &protocol.ConnUp{Conn: conn, MaxSessions: c.limit}
	for _, pid := range c.all() {
		ctx.Send(pid, up)
	}
	faultPoint("dialed:told")
	c.everUp = true
	pending := c.pending
	c.pending = nil
	for _, p := range pending {
		c.subscribe(ctx, p)
	}
	if c.started != nil {
		c.started <- Started{Children: c.children}
		c.started = nil
	}
	// Last: until here a panic leaves the dial in c.dialing, taken, and
	// reconcile redoes it.
	if c.dialing == m.h {
		c.dialing = nil
	}
}

// watch starts the watcher, which notices a lost connection at once (its
// Done channel), not at the next failed call.
func (c *connection) watch(ctx actor.Context, conn transport.Conn) {
	var wctx context.Context
	wctx, c.cancel = context.WithCancel(context.Background())
	self, env := ctx.Self(), c.env
	env.Go(func() {
		select {
		case <-conn.Done():
			env.Root.Send(self, &lost{conn: conn, err: conn.Err()})
		case <-wctx.Done():
		}
	})
}

// let goes of what this incarnation holds besides kept: its timer, a dial
// under way (a connection it made is closed) and its watcher.
func (c *connection) let() {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	c.abandonDial()
	if c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
}

func (c *connection) onLost(ctx actor.Context, m *lost) {
	if m.conn != c.conn || c.stopping {
		return
	}
	faultPoint("lost:begin")
	err := m.err
	if err == nil {
		err = errors.New("connection closed")
	}
	c.env.Log.Warn("amqpactor: connection lost", "connector", c.connector.String(), "connection", c.name, "error", err)
	c.lastErr = err
	c.restarts++
	c.set(protocol.StateRestarting, err)
	down := &protocol.ConnDown{Err: err}
	for _, pid := range c.all() {
		ctx.Send(pid, down)
	}
	faultPoint("lost:told")
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timer = c.env.After(c.env.Backoff.Delay(1), ctx.Self(), &redial{attempt: 1})
	// Last: until the connection is let go, a panic above leaves it in
	// c.conn, dead, and reconcile handles the loss again.
	if c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	c.conn = nil
}

// reconcile runs after the root resumed the actor: the message it panicked
// on is lost, so what that handler left half-done is finished or redone
// from what the actor holds and what the transport says. A dial whose
// answer was taken but not seen through is redone (its connection closed,
// the children told it is down); a connection whose Done channel is closed
// is lost; a live one not watched is watched; no connection and no dial
// under way dials at once (a panic is no reason to wait out a backoff).
func (c *connection) reconcile(ctx actor.Context) {
	if c.stopping {
		return
	}
	if h := c.dialing; h != nil && h.wasTaken() {
		c.dialing = nil
		if conn := h.taken; conn != nil {
			if conn == c.conn {
				// The children may have heard ConnUp on it already.
				if c.cancel != nil {
					c.cancel()
					c.cancel = nil
				}
				c.conn = nil
				down := &protocol.ConnDown{Err: errRedial}
				for _, pid := range c.all() {
					ctx.Send(pid, down)
				}
			}
			closeConn(c.env, conn)
		}
	}
	if c.conn != nil {
		select {
		case <-c.conn.Done():
			c.onLost(ctx, &lost{conn: c.conn, err: c.conn.Err()})
		default:
			if c.cancel == nil {
				c.watch(ctx, c.conn)
			}
		}
		return
	}
	if c.dialing == nil {
		if c.timer != nil {
			c.timer.Stop()
			c.timer = nil
		}
		c.dial(ctx, 1)
	}
}

// errRedial tells the children that a connection is given up because the
// actor panicked while adopting it; another is dialled at once.
var errRedial = errors.New("amqpactor: connection: the connection actor panicked while adopting a connection; dialling again")

// all are the children that hold sessions on this connection (the pool's
// other connections hold their own).
func (c *connection) all() []*actor.PID {
	var pids []*actor.PID
	if !c.isMember {
		pids = append(pids, c.children.Publisher, c.children.Requests, c.children.Txn)
	}
	for _, n := range c.subOrder {
		pids = append(pids, c.subs[n])
	}
	return pids
}

// childGone notes a subscription that stopped while it was still in subs:
// nobody asked it to, so its supervisor gave up on it after repeated
// failures. Its node turns failed (a StateChange says so, and App.Health
// names it) and stays in the tree; a Stop no longer waits for it.
func (c *connection) childGone(ctx actor.Context, pid *actor.PID) {
	if c.stopping {
		return
	}
	for i, mb := range c.members {
		if !mb.pid.Equal(pid) {
			continue
		}
		// Its strategy gave up on it (it kept panicking): its
		// subscriptions went with it. New ones go elsewhere.
		c.members = append(c.members[:i], c.members[i+1:]...)
		for name, p := range c.placed {
			if p == mb {
				delete(c.placed, name)
			}
		}
		err := fmt.Errorf("amqpactor: %s stopped by its supervisor after repeated failures, with %d subscriptions", mb.name, mb.subs)
		c.env.Log.Error("amqpactor: a connection of the pool failed for good", "connection", mb.name, "error", err)
		state := protocol.StateRestarting
		c.env.SetState(&state, actors.RootNode.Child(mb.name, "connection", c.connector.String()), actors.StateFailed, err)
		if c.failed == nil {
			c.failed = map[string]*protocol.Node{}
		}
		c.failed[mb.name] = &protocol.Node{Name: mb.name, Kind: "connection", PID: pid.String(),
			Address: c.connector.String(), State: actors.StateFailed, LastError: err.Error()}
		return
	}
	// The publisher, requests and txn actors serve every call of the App,
	// which sends to their PIDs: one its supervisor gave up on comes back
	// under its name (so the PID the App holds is its again), within a
	// budget. Past it the fault recurs on every start: the node turns
	// failed, and what is sent to its PID fails at once (the App answers
	// work that lands in protoactor's dead letters with a NodeError).
	type well struct {
		pid     *actor.PID
		props   func() *actor.Props
		adopted bool
	}
	wells := []well{
		{c.children.Publisher, func() *actor.Props { return session.NewPublisher(c.env, c.children.Senders) }, false},
		{c.children.Requests, func() *actor.Props { return session.NewRequests(c.env, c.children.Replies) }, false},
		{c.children.Txn, func() *actor.Props { return txn.New(c.env, c.connector.String()) }, false},
	}
	for _, a := range c.adopted {
		wells = append(wells, well{a.pid, a.props, true})
	}
	for _, w := range wells {
		if w.pid == nil || !w.pid.Equal(pid) {
			continue
		}
		name := pid.Id[strings.LastIndex(pid.Id, "/")+1:]
		if c.again == nil {
			c.again = map[string]*actors.Restarts{}
		}
		budget := c.again[name]
		if budget == nil {
			budget = &actors.Restarts{}
			c.again[name] = budget
		}
		if !budget.Spend(time.Now()) {
			err := fmt.Errorf("amqpactor: %s stopped by its supervisor after repeated failures, and started again too often (its restart budget is spent)", name)
			c.env.Log.Error("amqpactor: an actor of the connection failed for good", "actor", pid.Id, "error", err)
			n := c.node.Child(name, name, "")
			ne := &protocol.NodeError{Path: n.Path, Kind: n.Kind, Err: err}
			state := protocol.StateRestarting
			c.env.SetState(&state, n, actors.StateFailed, ne)
			if c.gaveUp == nil {
				c.gaveUp = map[string]*protocol.Node{}
			}
			c.gaveUp[name] = &protocol.Node{Name: name, Kind: name, PID: pid.String(), State: actors.StateFailed, LastError: ne.Error()}
			return
		}
		c.env.Log.Error("amqpactor: an actor of the connection spent its restarts; starting it again", "actor", pid.Id)
		c.panics++
		np := spawn(ctx, w.props(), name)
		if w.adopted {
			return
		}
		if c.conn != nil {
			ctx.Send(np, &protocol.ConnUp{Conn: c.conn})
		}
		return
	}
	for i, name := range c.subOrder {
		if !c.subs[name].Equal(pid) {
			continue
		}
		delete(c.subs, name)
		c.subOrder = append(c.subOrder[:i], c.subOrder[i+1:]...)
		err := fmt.Errorf("amqpactor: subscription %s stopped by its supervisor after repeated failures (its restart budget is spent)", name)
		c.env.Log.Error("amqpactor: a subscription failed for good", "subscription", name, "error", err)
		state := protocol.StateRestarting
		n := c.subNode(name)
		c.release(ctx, name)
		c.env.SetState(&state, n, actors.StateFailed, err)
		if c.failed == nil {
			c.failed = map[string]*protocol.Node{}
		}
		c.failed[name] = &protocol.Node{Name: "subscription:" + name, Kind: "subscription", PID: pid.String(),
			Address: c.subAddr[name], State: actors.StateFailed, LastError: err.Error()}
		return
	}
}

// adopt spawns the actor of m (see Adopt), or answers the one it has.
func (c *connection) adopt(ctx actor.Context, m *Adopt) {
	if c.isMember || c.stopping {
		m.Adopted(nil, protocol.ErrStopped)
		return
	}
	for _, a := range c.adopted {
		if a.name == m.Name {
			m.Adopted(a.pid, nil)
			return
		}
	}
	pid, err := ctx.SpawnNamed(m.Props(), m.Name)
	if err != nil {
		m.Adopted(nil, fmt.Errorf("amqpactor: spawning %s: %w", m.Name, err))
		return
	}
	c.adopted = append(c.adopted, &adoptee{name: m.Name, pid: pid, props: m.Props})
	m.Adopted(pid, nil)
}

// subNode is the node of this connection's subscription name.
func (c *connection) subNode(name string) actors.Node {
	return c.node.Child("subscription:"+name, "subscription", c.subAddr[name])
}

// release tells the first connection that this member holds name no more.
func (c *connection) release(ctx actor.Context, name string) {
	if c.isMember {
		ctx.Send(ctx.Parent(), &released{name: name})
	}
}

// failPending answers a member's Subscribes that wait for its first
// connection with err.
func (c *connection) failPending(ctx actor.Context, err error) {
	pending := c.pending
	c.pending = nil
	for _, p := range pending {
		p.Done <- err
		c.release(ctx, p.Spec.Name)
	}
}

// subscribe spawns the subscription of m, which answers m.Done once its
// first attach is done: here, while the first connection has room for its
// session, else on a connection of the pool with room, a new one if none has.
func (c *connection) subscribe(ctx actor.Context, m *protocol.Subscribe) {
	if c.stopping {
		m.Done <- protocol.ErrStopped
		c.release(ctx, m.Spec.Name)
		return
	}
	name := m.Spec.Name
	if _, ok := c.placed[name]; ok {
		m.Done <- fmt.Errorf("amqpactor: subscription %q exists", name)
		return
	}
	if c.isMember && !c.everUp {
		c.pending = append(c.pending, m)
		return
	}
	if !c.isMember && len(c.subs) >= c.room() {
		if _, ok := c.subs[name]; !ok {
			mb := c.memberWithRoom(ctx)
			mb.subs++
			c.placed[name] = mb
			ctx.Send(mb.pid, m)
			return
		}
	}
	if c.isMember {
		m.Spec.ConnPath = c.node.Path
	}
	pid, err := ctx.SpawnNamed(session.NewSubscription(c.env, m.Spec, m.Done), "subscription:"+name)
	if errors.Is(err, actor.ErrNameExists) {
		err = fmt.Errorf("amqpactor: subscription %q exists", name)
	}
	if err != nil {
		m.Done <- err
		c.release(ctx, name)
		return
	}
	delete(c.failed, name)
	c.subs[name] = pid
	c.subOrder = append(c.subOrder, name)
	if c.subAddr == nil {
		c.subAddr = map[string]string{}
	}
	c.subAddr[name] = m.Spec.Address.String()
	if c.conn != nil {
		ctx.Send(pid, &protocol.ConnUp{Conn: c.conn, MaxSessions: c.limit})
	}
}

// perConnection is the sessions planned per connection: the first
// connection's figure once it is known.
func (c *connection) perConnection() int {
	if c.limit > 0 {
		return c.limit
	}
	if n := c.env.MaxSessions; n > 0 && n < DefaultMaxSessions {
		return n
	}
	return DefaultMaxSessions
}

// room is how many subscriptions the first connection holds itself.
func (c *connection) room() int { return max(c.perConnection()-reserved, 0) }

// memberWithRoom returns the first member with room for a subscription,
// spawning a new one when none has.
func (c *connection) memberWithRoom(ctx actor.Context) *member {
	room := max(c.perConnection()-spare, 1)
	for _, mb := range c.members {
		if mb.subs < room {
			return mb
		}
	}
	if c.next == 0 {
		c.next = 2
	}
	name := fmt.Sprintf("%s%d", memberPrefix, c.next)
	c.next++
	mb := &member{pid: spawn(ctx, newMember(c.env, c.connector, name), name), name: name}
	c.members = append(c.members, mb)
	c.env.Log.Info("amqpactor: adding a connection to the pool", "connector", c.connector.String(), "connection", name,
		"sessions", c.perConnection())
	return mb
}

func (c *connection) unsubscribe(ctx actor.Context, m *protocol.Unsubscribe) {
	pid, ok := c.subs[m.Name]
	if !ok {
		if mb, ok := c.placed[m.Name]; ok {
			ctx.Send(mb.pid, m)
			return
		}
		m.Done <- nil
		return
	}
	self, env := ctx.Self(), c.env
	env.Go(func() {
		// DrainAll counts a subscription that stops before it answers
		// (its supervisor gave up on it meanwhile) as drained: its Drain
		// would be dropped with its mailbox.
		err := env.DrainAll(&protocol.Drain{Ctx: m.Ctx, Graceful: m.Graceful}, []*actor.PID{pid})
		select {
		case <-env.Stopped():
			// The tree has stopped: nobody will read unsubscribed.
			m.Done <- protocol.ErrStopped
			return
		default:
		}
		env.Root.Send(self, &unsubscribed{name: m.Name, done: m.Done, err: err})
	})
}

// drain is the graceful stop (docs/ARCHITECTURE.md, "Lifecycle"):
// subscriptions and requests first (no new work; in-flight handlers finish
// and settle; receivers detach), then the publisher (confirmations awaited,
// senders detached), then the connection closes. Everything is bounded by
// the drain's context.
func (c *connection) drain(ctx actor.Context, m *protocol.Drain) {
	c.stopping = true
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	c.abandonDial()
	env, self := c.env, ctx.Self()
	c.failPending(ctx, protocol.ErrStopped)
	var first, second []*actor.PID
	if !c.isMember {
		first = append(first, c.children.Requests)
		second = append(second, c.children.Publisher, c.children.Txn)
	}
	for _, n := range c.subOrder {
		first = append(first, c.subs[n])
	}
	// The App's own actors publish through the publisher: they stop
	// taking work before it drains.
	for _, a := range c.adopted {
		first = append(first, a.pid)
	}
	// Every connection of the pool drains its own subscriptions, in
	// parallel with this one's.
	for _, mb := range c.members {
		first = append(first, mb.pid)
	}
	conn, cancel := c.conn, c.cancel
	c.conn, c.cancel = nil, nil
	env.Go(func() {
		errs := []error{env.DrainAll(m, first), env.DrainAll(m, second)}
		if cancel != nil {
			cancel()
		}
		if conn != nil {
			cctx, ccancel := env.CloseCtx(m.Ctx)
			errs = append(errs, conn.Close(cctx))
			ccancel()
		}
		env.Root.Send(self, &closed{})
		m.Done <- errors.Join(errs...)
	})
}

// set changes the connection's state (see actors.Env.SetState).
func (c *connection) set(to string, err error) {
	n := c.node
	n.Address = c.connector.String()
	c.env.SetState(&c.state, n, to, err)
}

func (c *connection) describe(ctx actor.Context) *protocol.Described {
	n := &protocol.Node{
		Name: c.name, Kind: "connection", PID: ctx.Self().String(),
		Address: c.connector.String(), State: c.state, Restarts: c.restarts + c.panics,
		Counters: map[string]uint64{"reconnects": uint64(c.restarts), "panics": uint64(c.panics)},
		Broker:   c.broker,
	}
	if c.lastErr != nil {
		n.LastError = c.lastErr.Error()
	}
	if c.limit > 0 {
		n.Counters["max-sessions"] = uint64(c.limit)
	}
	if c.rootPanics > 0 {
		n.Counters["root_panics"] = uint64(c.rootPanics)
	}
	var children []*actor.PID
	for _, pid := range c.all() {
		// One failed for good is drawn from failed, below.
		if _, gone := c.gaveUp[pid.Id[strings.LastIndex(pid.Id, "/")+1:]]; !gone || c.isMember {
			children = append(children, pid)
		}
	}
	for _, a := range c.adopted {
		if _, gone := c.gaveUp[a.name]; !gone {
			children = append(children, a.pid)
		}
	}
	for _, mb := range c.members {
		children = append(children, mb.pid)
	}
	d := &protocol.Described{Node: n, Children: children, Self: ctx.Self()}
	for _, name := range slices.Sorted(maps.Keys(c.gaveUp)) {
		d.Gone = append(d.Gone, c.gaveUp[name])
	}
	for _, name := range slices.Sorted(maps.Keys(c.failed)) {
		d.Gone = append(d.Gone, c.failed[name])
	}
	return d
}
