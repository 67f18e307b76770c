// Package connection owns the root of an App's actor tree: it dials the
// connector, tells every child when the connection is up or down, reconnects
// with backoff when it is lost, and orchestrates the graceful stop.
package connection

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/session"
	"github.com/amqpactor/amqpactor/actors/txn"
	"github.com/amqpactor/amqpactor/messages"
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

// New returns the props of the connection actor; started receives the result
// of the first dial.
func New(env *actors.Env, c transport.Connector, started chan<- Started) *actor.Props {
	return env.Props(func() actor.Actor {
		return &connection{env: env, connector: c, started: started, subs: map[string]*actor.PID{}}
	}, actor.WithSupervisor(actors.Supervisor()))
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
)

type connection struct {
	env       *actors.Env
	connector transport.Connector
	started   chan<- Started
	children  Children
	subs      map[string]*actor.PID
	subOrder  []string

	conn     transport.Conn
	cancel   context.CancelFunc
	dialing  *handoff // the dial in progress, if any
	state    string
	lastErr  error
	restarts int
	terminal int // terminal dial errors in a row (credentials refused)
	timer    *time.Timer
	stopping bool
	// connectedAt is when the current connection came up.
	connectedAt time.Time
}

func (c *connection) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		c.children.Senders = session.NewSenders()
		c.children.Publisher = spawn(ctx, session.NewPublisher(c.env, c.children.Senders), "publisher")
		c.children.Replies = session.NewReplies()
		c.children.Requests = spawn(ctx, session.NewRequests(c.env, c.children.Replies), "requests")
		c.children.Txn = spawn(ctx, txn.New(c.env, c.connector.String()), "txn")
		c.dial(ctx, 1)
	case *dialed:
		c.onDialed(ctx, m)
	case *lost:
		c.onLost(ctx, m)
	case *messages.Reconnect:
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
	case *messages.Subscribe:
		c.subscribe(ctx, m)
	case *messages.Unsubscribe:
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
		}
		m.done <- m.err
	case *messages.Pause, *messages.Resume:
		name := ""
		if p, ok := m.(*messages.Pause); ok {
			name = p.Name
		} else {
			name = m.(*messages.Resume).Name
		}
		if pid, ok := c.subs[name]; ok {
			ctx.Send(pid, m)
		}
	case *messages.Drain:
		c.drain(ctx, m)
	case *closed:
		c.set(messages.StateDetached, nil)
	case *actor.Stopped:
		c.set(messages.StateStopped, nil)
	case *messages.Describe:
		ctx.Respond(c.describe(ctx))
	case *actor.Stopping:
		c.stopping = true
		if c.timer != nil {
			c.timer.Stop()
		}
		c.abandonDial()
		if c.cancel != nil {
			c.cancel()
		}
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
			c.started <- Started{Err: messages.ErrStopped}
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
	c.set(messages.StateAttaching, nil)
	self, connector, env := ctx.Self(), c.connector, c.env
	dctx, cancel := env.CloseCtx(context.Background())
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
			c.started <- Started{Err: fmt.Errorf("%w: %w", messages.ErrStopped, m.err)}
			c.started = nil
			return
		}
		if c.started != nil {
			// The first dial decides Start; the App gives up on us.
			c.started <- Started{Err: m.err}
			c.started = nil
			c.set(messages.StateDetached, m.err)
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
		c.set(messages.StateRestarting, m.err)
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
	c.set(messages.StateAttached, nil)
	var wctx context.Context
	wctx, c.cancel = context.WithCancel(context.Background())
	self := ctx.Self()
	// The watcher notices a lost connection at once (its Done channel),
	// not at the next failed call.
	c.env.Go(func() {
		select {
		case <-conn.Done():
			c.env.Root.Send(self, &lost{conn: conn, err: conn.Err()})
		case <-wctx.Done():
		}
	})
	up := &messages.ConnUp{Conn: conn}
	for _, pid := range c.all() {
		ctx.Send(pid, up)
	}
	if c.started != nil {
		c.started <- Started{Children: c.children}
		c.started = nil
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
	c.lastErr = err
	c.restarts++
	c.set(messages.StateRestarting, err)
	down := &messages.ConnDown{Err: err}
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

func (c *connection) subscribe(ctx actor.Context, m *messages.Subscribe) {
	if c.stopping {
		m.Done <- messages.ErrStopped
		return
	}
	if _, dup := c.subs[m.Spec.Name]; dup {
		m.Done <- fmt.Errorf("amqpactor: subscription %q exists", m.Spec.Name)
		return
	}
	pid, err := ctx.SpawnNamed(session.NewSubscription(c.env, m.Spec, m.Done), "subscription:"+m.Spec.Name)
	if err != nil {
		m.Done <- err
		return
	}
	c.subs[m.Spec.Name] = pid
	c.subOrder = append(c.subOrder, m.Spec.Name)
	if c.conn != nil {
		ctx.Send(pid, &messages.ConnUp{Conn: c.conn})
	}
}

func (c *connection) unsubscribe(ctx actor.Context, m *messages.Unsubscribe) {
	pid, ok := c.subs[m.Name]
	if !ok {
		m.Done <- nil
		return
	}
	self, env := ctx.Self(), c.env
	done := make(chan error, 1)
	ctx.Send(pid, &messages.Drain{Ctx: m.Ctx, Graceful: m.Graceful, Done: done})
	env.Go(func() {
		var err error
		select {
		case err = <-done:
		case <-m.Ctx.Done():
			err = m.Ctx.Err()
		case <-env.Stopped():
			// The tree has stopped: nobody will read unsubscribed.
			m.Done <- messages.ErrStopped
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
func (c *connection) drain(ctx actor.Context, m *messages.Drain) {
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

func (c *connection) describe(ctx actor.Context) *messages.Described {
	n := &messages.Node{
		Name: "connection", Kind: "connection", PID: ctx.Self().String(),
		Address: c.connector.String(), State: c.state, Restarts: c.restarts,
	}
	if c.lastErr != nil {
		n.LastError = c.lastErr.Error()
	}
	return &messages.Described{Node: n, Children: c.all()}
}
