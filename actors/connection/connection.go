// Package connection owns the root of an App's actor tree: it dials the
// connector, tells every child when the connection is up or down, reconnects
// with backoff when it is lost, and orchestrates the graceful stop.
package connection

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/session"
	"github.com/amqpactor/amqpactor/actors/txn"
	"github.com/amqpactor/amqpactor/internal/protocol"
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
// The root spawns the publisher, the requests and txn actors, the
// subscriptions and, last, the connection actor, which dials, reconnects
// and orders the graceful stop. The connection actor is their sibling, not
// their parent: protoactor stops an actor's children when it restarts it,
// so a panicking connection actor would take every link with it. The root
// only spawns and forwards; it holds no connection and never blocks.
func New(env *actors.Env, c transport.Connector, started chan<- Started) *actor.Props {
	return env.Props(func() actor.Actor {
		return &root{env: env, connector: c, started: started}
	}, actor.WithSupervisor(actors.Supervisor()))
}

// root is the App's root actor (see New).
type root struct {
	env       *actors.Env
	connector transport.Connector
	started   chan<- Started
	conn      *actor.PID // the connection actor
	stopping  bool
}

// subAdded tells the connection actor of a subscription the root spawned.
type subAdded struct {
	name string
	addr string
	pid  *actor.PID
	done chan<- error
}

func (r *root) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		ch := Children{Senders: session.NewSenders(), Replies: session.NewReplies()}
		ch.Publisher = spawn(ctx, session.NewPublisher(r.env, ch.Senders), "publisher")
		ch.Requests = spawn(ctx, session.NewRequests(r.env, ch.Replies), "requests")
		ch.Txn = spawn(ctx, txn.New(r.env, r.connector.String()), "txn")
		r.conn = spawn(ctx, newConnection(r.env, r.connector, r.started, ch), "connection")
	case *protocol.Subscribe:
		if r.stopping {
			m.Done <- protocol.ErrStopped
			return
		}
		pid, err := ctx.SpawnNamed(session.NewSubscription(r.env, m.Spec, m.Done), "subscription:"+m.Spec.Name)
		if errors.Is(err, actor.ErrNameExists) {
			err = fmt.Errorf("amqpactor: subscription %q exists", m.Spec.Name)
		}
		if err != nil {
			m.Done <- err
			return
		}
		ctx.Send(r.conn, &subAdded{name: m.Spec.Name, addr: m.Spec.Address.String(), pid: pid, done: m.Done})
	case *protocol.Drain:
		r.stopping = true
		ctx.Forward(r.conn)
	case *actor.Terminated:
		if m.Who.Equal(r.conn) && !r.stopping {
			// Its supervisor gave up on it (it kept panicking): without
			// it nothing reconnects, so the App's tree ends here.
			r.env.Log.Error("amqpactor: the connection actor stopped; stopping the App's tree", "connector", r.connector.String())
			ctx.Stop(ctx.Self())
			return
		}
		if !r.stopping && r.conn != nil {
			// A subscription ended: the connection actor knows whether it
			// asked for that (an Unsubscribe) or its supervisor gave up.
			ctx.Send(r.conn, &childGone{pid: m.Who})
		}
	case *actor.Stopping, *actor.Stopped, *actor.Restarting, *actor.ReceiveTimeout:
	default:
		// Describe, Pause, Resume, Unsubscribe, a child's Reconnect: the
		// connection actor's, with the sender kept for its answer.
		ctx.Forward(r.conn)
	}
}

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
	// childGone: a child of the root stopped.
	childGone struct{ pid *actor.PID }
)

// newConnection returns the props of the connection actor, which children
// names the root's children.
//
// A connection actor that panics is restarted by the root's strategy: on
// Restarting the dying incarnation stops its timer, gives up a dial under
// way and ends its watcher; the next incarnation keeps the connection (no
// child hears of the restart), the subscriptions and the counters, watches
// the connection again, or dials when there was none. The message it
// panicked on is lost.
func newConnection(env *actors.Env, c transport.Connector, started chan<- Started, children Children) *actor.Props {
	k := &kept{env: env, connector: c, started: started, children: children, subs: map[string]*actor.PID{}}
	return env.Props(func() actor.Actor { return &connection{kept: k} })
}

// kept is what the connection actor's incarnations share; only its
// mailbox run writes it (Restarting, then the next incarnation's Started).
type kept struct {
	env       *actors.Env
	connector transport.Connector
	started   chan<- Started
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
	terminal int // terminal dial errors in a row (credentials refused)
	stopping bool
	// connectedAt is when the current connection came up.
	connectedAt time.Time
	// broker is what the last connection's peer called itself (shown by
	// the node while it reconnects, too).
	broker string
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
	case *actors.Crash:
		panic("amqpactor: connection: " + m.Reason)
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
		if !c.stopping && c.conn == nil {
			c.dial(ctx, m.attempt)
		}
	case *subAdded:
		c.subAdded(ctx, m)
	case *protocol.Unsubscribe:
		c.unsubscribe(ctx, m)
	case *childGone:
		c.childGone(m.pid)
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
		}
		m.done <- m.err
	case *protocol.Pause, *protocol.Resume:
		name := ""
		if p, ok := m.(*protocol.Pause); ok {
			name = p.Name
		} else {
			name = m.(*protocol.Resume).Name
		}
		if pid, ok := c.subs[name]; ok {
			ctx.Send(pid, m)
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
	}
}

func spawn(ctx actor.Context, props *actor.Props, name string) *actor.PID {
	pid, err := ctx.SpawnNamed(props, name)
	if err != nil {
		panic(fmt.Errorf("amqpactor: spawning %s: %w", name, err))
	}
	return pid
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
}

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
	if c.dialing == m.h {
		c.dialing = nil
	}
	if m.err == nil && conn == nil {
		return // given up on (abandonDial closed it)
	}
	if m.err != nil {
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
	if c.stopping {
		closeConn(c.env, conn)
		return
	}
	c.conn = conn
	c.connectedAt = time.Now()
	c.broker = conn.Features().Broker
	c.set(protocol.StateAttached, nil)
	c.watch(ctx, conn)
	up := &protocol.ConnUp{Conn: conn}
	for _, pid := range c.all() {
		ctx.Send(pid, up)
	}
	if c.started != nil {
		c.started <- Started{Children: c.children}
		c.started = nil
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
	err := m.err
	if err == nil {
		err = errors.New("connection closed")
	}
	c.env.Log.Warn("amqpactor: connection lost", "connector", c.connector.String(), "error", err)
	c.conn = nil
	c.cancel()
	c.cancel = nil
	c.lastErr = err
	c.restarts++
	c.set(protocol.StateRestarting, err)
	down := &protocol.ConnDown{Err: err}
	for _, pid := range c.all() {
		ctx.Send(pid, down)
	}
	c.timer = c.env.After(c.env.Backoff.Delay(1), ctx.Self(), &redial{attempt: 1})
}

func (c *connection) all() []*actor.PID {
	pids := []*actor.PID{c.children.Publisher, c.children.Requests, c.children.Txn}
	for _, n := range c.subOrder {
		pids = append(pids, c.subs[n])
	}
	return pids
}

// childGone notes a subscription that stopped while it was still in subs:
// nobody asked it to, so its supervisor gave up on it after repeated
// failures. Its node turns failed (a StateChange says so, and App.Health
// names it) and stays in the tree; a Stop no longer waits for it.
func (c *connection) childGone(pid *actor.PID) {
	if c.stopping {
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
		n := actors.SubscriptionNode(name, c.subAddr[name])
		c.env.SetState(&state, n, actors.StateFailed, err)
		if c.failed == nil {
			c.failed = map[string]*protocol.Node{}
		}
		c.failed[name] = &protocol.Node{Name: "subscription:" + name, Kind: "subscription", PID: pid.String(),
			Address: c.subAddr[name], State: actors.StateFailed, LastError: err.Error()}
		return
	}
}

// subAdded takes in a subscription the root spawned.
func (c *connection) subAdded(ctx actor.Context, m *subAdded) {
	if c.stopping {
		// The drain began after the root spawned it: it never attaches.
		ctx.Stop(m.pid) // it answers its Subscribe ErrStopped
		return
	}
	c.subs[m.name] = m.pid
	c.subOrder = append(c.subOrder, m.name)
	if c.subAddr == nil {
		c.subAddr = map[string]string{}
	}
	c.subAddr[m.name] = m.addr
	if c.conn != nil {
		ctx.Send(m.pid, &protocol.ConnUp{Conn: c.conn})
	}
}

func (c *connection) unsubscribe(ctx actor.Context, m *protocol.Unsubscribe) {
	pid, ok := c.subs[m.Name]
	if !ok {
		m.Done <- nil
		return
	}
	self, env := ctx.Self(), c.env
	done := make(chan error, 1)
	ctx.Send(pid, &protocol.Drain{Ctx: m.Ctx, Graceful: m.Graceful, Done: done})
	env.Go(func() {
		var err error
		select {
		case err = <-done:
		case <-m.Ctx.Done():
			err = m.Ctx.Err()
		case <-env.Stopped():
			// The tree has stopped: nobody will read unsubscribed.
			m.Done <- protocol.ErrStopped
			return
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
	first := []*actor.PID{c.children.Requests}
	for _, n := range c.subOrder {
		first = append(first, c.subs[n])
	}
	second := []*actor.PID{c.children.Publisher, c.children.Txn}
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
	n := actors.RootNode
	n.Address = c.connector.String()
	c.env.SetState(&c.state, n, to, err)
}

func (c *connection) describe(ctx actor.Context) *protocol.Described {
	n := &protocol.Node{
		Name: "connection", Kind: "connection", PID: ctx.Self().String(),
		Address: c.connector.String(), State: c.state, Restarts: c.restarts + c.panics,
		Counters: map[string]uint64{"reconnects": uint64(c.restarts), "panics": uint64(c.panics)},
		Broker:   c.broker,
	}
	if c.lastErr != nil {
		n.LastError = c.lastErr.Error()
	}
	d := &protocol.Described{Node: n, Children: c.all(), Self: ctx.Self()}
	for _, name := range slices.Sorted(maps.Keys(c.failed)) {
		d.Gone = append(d.Gone, c.failed[name])
	}
	return d
}
