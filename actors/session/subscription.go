package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/dispatcher"
	"github.com/amqpactor/amqpactor/actors/receiver"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/transport"
)

// NewSubscription returns the props of the session actor of one
// subscription. started receives the result of its first attach.
//
// A subscription that panics is restarted by the connection's strategy:
// on Restarting the dying incarnation stops its timer and ends its session
// (protoactor then stops its receiver, whose link's end gives back what it
// had not settled, and its dispatcher); the next incarnation makes a new
// Router and dispatcher and, when the connection is up, opens a session
// and spawns a receiver at once rather than on the next ConnUp.
func NewSubscription(env *actors.Env, spec *protocol.SubscriptionSpec, started chan<- error) *actor.Props {
	k := &subKept{started: started, paused: spec.Paused}
	return env.Props(func() actor.Actor {
		return &subscription{env: env, spec: spec, started: k.started, kept: k}
	})
}

// subKept is what one subscription's incarnations share; only the actor's
// mailbox run writes it (on Restarting, before the producer runs).
type subKept struct {
	started  chan<- error
	conn     transport.Conn
	limit    int // the connection's planned sessions (ConnUp.MaxSessions)
	paused   bool
	draining bool
	panics   atomic.Uint64
}

type subscription struct {
	env        *actors.Env
	spec       *protocol.SubscriptionSpec
	started    chan<- error
	conn       transport.Conn
	limit      int // ConnUp.MaxSessions, for the error of a refused session
	sess       transport.Session
	receiver   *actor.PID
	dispatcher *actor.PID
	router     *dispatcher.Router
	state      string
	lastErr    error
	restarts   int
	attempt    int
	replaced   int // sessions replaced since the last good attach
	terminal   int // terminal refusals in a row that ended the session
	timer      *time.Timer
	paused     bool
	draining   bool
	exiting    bool // this incarnation is restarting or stopping: its children go with it
	kept       *subKept
}

func (s *subscription) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.set(protocol.StateDetached, nil)
		s.paused, s.draining = s.kept.paused, s.kept.draining
		// The dispatcher outlives links and sessions: partitions keep their
		// order across a re-attach.
		s.router = dispatcher.NewRouter(s.spec)
		pid, err := ctx.SpawnNamed(dispatcher.New(s.env, s.spec, s.router), "dispatcher")
		if err != nil {
			panic(err)
		}
		s.dispatcher = pid
		if c := s.kept.conn; c != nil && !s.draining {
			// Restarted on a live connection: no ConnUp will come.
			s.conn, s.limit = c, s.kept.limit
			s.set(protocol.StateAttaching, nil)
			openSession(s.env, ctx.Self(), c, s.attachCtx())
		}
	case *testhook.Crash:
		panic("amqpactor: subscription " + s.spec.Name + ": " + m.Reason)
	case *actor.Terminated:
		// A child this incarnation did not stop was stopped by its
		// supervisor (it spent its restart budget). Without it nothing
		// consumes while the node looks attached: escalate, so that the
		// connection's strategy restarts the subscription with a new
		// dispatcher, session and link (or, past its own budget, gives up
		// on it, which the root reports as failed).
		if s.exiting || s.draining {
			return
		}
		if s.receiver != nil && m.Who.Equal(s.receiver) || s.dispatcher != nil && m.Who.Equal(s.dispatcher) {
			s.env.Log.Error("amqpactor: a child of the subscription spent its restarts; restarting the subscription",
				"address", s.spec.Address.String(), "child", m.Who.Id)
			err := fmt.Errorf("amqpactor: subscription %s: %s stopped by its supervisor after repeated failures", s.spec.Name, m.Who.Id)
			// Behind the failure in the mailbox: should the strategy
			// resume this incarnation rather than restart it, it
			// rebuilds what it lost by itself.
			ctx.Send(ctx.Self(), &childLost{inc: s, who: m.Who, err: err})
			panic(err)
		}
	case *childLost:
		if m.inc == s && !s.exiting && !s.draining {
			s.rebuild(ctx, m)
		}
	case *actor.Restarting:
		s.exiting = true
		s.kept.panics.Add(1)
		s.kept.started, s.kept.conn, s.kept.paused, s.kept.draining = s.started, s.conn, s.paused, s.draining
		s.kept.limit = s.limit
		if s.timer != nil {
			s.timer.Stop()
		}
		closeSession(s.env, s.sess)
		s.sess = nil
		s.set(protocol.StateRestarting, nil)
	case *protocol.ConnUp:
		s.conn, s.limit = m.Conn, m.MaxSessions
		s.terminal = 0
		s.set(protocol.StateAttaching, nil)
		openSession(s.env, ctx.Self(), m.Conn, s.attachCtx())
	case *retrySession:
		s.timer = nil
		if m.conn == s.conn && s.sess == nil && !s.draining {
			openSession(s.env, ctx.Self(), m.conn, s.attachCtx())
		}
	case *sessionResult:
		s.onSession(ctx, m)
	case *receiver.Attached:
		s.onAttached(ctx, m)
	case *receiver.SessionLost:
		if ctx.Sender() != nil && !ctx.Sender().Equal(s.receiver) || s.draining {
			return
		}
		s.lastErr = m.Err
		if s.receiver != nil {
			ctx.Stop(s.receiver)
			s.receiver = nil
			s.restarts++
		}
		s.sess = nil
		s.set(protocol.StateRestarting, m.Err)
		s.attempt++
		delay := s.env.Backoff.Delay(s.attempt)
		if actors.Terminal(m.Err) {
			// RabbitMQ 4 ends the session when it refuses an attach: the
			// refusal is counted here, across sessions, and retried
			// only after the longest backoff, a bounded number of times.
			s.terminal++
			if s.terminal > actors.TerminalRetries {
				s.set(actors.StateFailed, m.Err)
				s.env.Log.Error("amqpactor: subscription gave up re-attaching", "address", s.spec.Address.String(),
					"attempts", s.terminal, "error", m.Err)
				return
			}
			delay = s.env.Backoff.Delay(1 << 20)
		}
		// An attach the broker never answered (a timeout) condemns the
		// connection at once; other failures after a second new session.
		s.replaced++
		unanswered := errors.Is(m.Err, context.DeadlineExceeded)
		if (unanswered || s.replaced >= 2) && !actors.Terminal(m.Err) && s.conn != nil {
			// New sessions fail like the old ones: the connection itself
			// is suspect (seen after a broker crash: a connection made
			// while the node was still recovering never completes a
			// quorum-queue attach). Escalate: the connection reconnects
			// and every child starts over on the new one.
			s.replaced = 0
			s.env.Log.Warn("amqpactor: new sessions keep failing; asking the connection to reconnect",
				"address", s.spec.Address.String(), "error", m.Err)
			ctx.Send(ctx.Parent(), &protocol.Reconnect{Err: m.Err})
			// No return: the connection declines a request on a brand-new
			// connection or a second one, and the retry is then all there is.
		}
		if s.conn != nil {
			s.timer = s.env.After(delay, ctx.Self(), &retrySession{conn: s.conn})
		}
	case *protocol.ConnDown:
		s.conn, s.sess = nil, nil
		s.set(protocol.StateDetached, m.Err)
		s.lastErr = m.Err
		if s.receiver != nil {
			ctx.Stop(s.receiver)
			s.receiver = nil
			s.restarts++
		}
	case *protocol.Pause:
		s.paused = true
		if s.receiver != nil {
			ctx.Send(s.receiver, m)
		}
	case *protocol.Resume:
		s.paused = false
		if s.receiver != nil {
			ctx.Send(s.receiver, m)
		}
	case *protocol.Drain:
		s.onDrain(m)
	case *protocol.Describe:
		ctx.Respond(s.describe(ctx))
	case *actor.Stopped:
		s.set(protocol.StateStopped, nil)
	case *actor.Stopping:
		s.exiting = true
		if s.timer != nil {
			s.timer.Stop()
		}
		closeSession(s.env, s.sess)
		s.sess = nil
		s.report(protocol.ErrStopped)
	}
}

// childLost follows a subscription's failure for a child its supervisor
// stopped (who): a strategy that resumed incarnation inc, rather than
// restarting it, leaves it without that child.
type childLost struct {
	inc *subscription
	who *actor.PID
	err error
}

// rebuild does for a resumed incarnation what a restart would: a new
// dispatcher if that is what was lost, and a new session and receiver.
func (s *subscription) rebuild(ctx actor.Context, m *childLost) {
	s.env.Log.Warn("amqpactor: subscription resumed without a child; building it again",
		"address", s.spec.Address.String(), "child", m.who.Id)
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if s.dispatcher != nil && m.who.Equal(s.dispatcher) {
		// The receiver hands deliveries to the dispatcher: it goes too.
		s.router = dispatcher.NewRouter(s.spec)
		pid, err := ctx.SpawnNamed(dispatcher.New(s.env, s.spec, s.router), "dispatcher")
		if err != nil {
			panic(err)
		}
		s.dispatcher = pid
	}
	if s.receiver != nil {
		if !m.who.Equal(s.receiver) {
			ctx.Stop(s.receiver)
		}
		s.receiver = nil
		s.restarts++
	}
	closeSession(s.env, s.sess)
	s.sess = nil
	s.lastErr = m.err
	s.set(protocol.StateRestarting, m.err)
	if s.conn != nil {
		s.set(protocol.StateAttaching, nil)
		openSession(s.env, ctx.Self(), s.conn, s.attachCtx())
	}
}

func (s *subscription) onSession(ctx actor.Context, m *sessionResult) {
	if m.conn != s.conn || s.draining || s.sess != nil {
		// Another connection's, a drained subscription's, or one a dead
		// incarnation asked for while this one has its own session.
		closeSession(s.env, m.sess)
		return
	}
	if m.err != nil {
		m.err = refusedSession(m.err, s.limit)
		s.lastErr = m.err
		if s.started != nil {
			s.report(m.err)
			return
		}
		s.set(protocol.StateRestarting, m.err)
		s.attempt++
		s.timer = s.env.After(s.env.Backoff.Delay(s.attempt), ctx.Self(), &retrySession{conn: m.conn})
		return
	}
	s.sess, s.attempt = m.sess, 0
	// A fresh name per session: the receiver of a dead session may still be
	// stopping. It is made paused, not told afterwards: its first attach
	// may come before a message would.
	pid := ctx.SpawnPrefix(receiver.New(s.env, s.sess, s.spec, s.dispatcher, s.paused, s.started == nil), "receiver")
	s.receiver = pid
}

// refusedSession names, in the error of a session refused for want of room
// (amqp:resource-limit-exceeded, or go-amqp's own channel-max), the figure
// the connection was planned with and the option that lowers it.
func refusedSession(err error, limit int) error {
	var ae *amqp.Error
	full := errors.As(err, &ae) && ae.Condition == amqp.ErrCondResourceLimitExceeded ||
		strings.Contains(err.Error(), "channel max")
	if !full {
		return err
	}
	planned := "its connection was planned with the broker's session limit"
	if limit > 0 {
		planned = fmt.Sprintf("its connection was planned with %d sessions", limit)
	}
	return fmt.Errorf("%w (%s; for a broker that allows fewer than it advertises, WithMaxSessionsPerConnection lowers the figure)", err, planned)
}

func (s *subscription) onAttached(ctx actor.Context, m *receiver.Attached) {
	switch {
	case m.Failed:
		s.lastErr = m.Err
		s.set(actors.StateFailed, m.Err)
	case m.Err != nil:
		s.lastErr = m.Err
		s.set(protocol.StateDetached, m.Err)
	default:
		s.terminal, s.replaced = 0, 0
		s.set(protocol.StateAttached, nil)
	}
	s.report(m.Err)
}

// set changes the subscription's state (see actors.Env.SetState).
func (s *subscription) set(to string, err error) {
	s.env.SetState(&s.state, actors.SpecNode(s.spec), to, err)
}

// attachCtx is the caller's context while the first attach is under way
// (Start's or Subscribe's, see SubscriptionSpec.AttachCtx), nil after.
func (s *subscription) attachCtx() context.Context {
	if s.started == nil {
		return nil
	}
	return s.spec.AttachCtx
}

// report answers the first attach, once.
func (s *subscription) report(err error) {
	if s.started != nil {
		s.started <- err
		s.started = nil
	}
}

// onDrain detaches gracefully: the receiver stops taking deliveries, lets
// handlers finish and settle, detaches; then the session ends.
func (s *subscription) onDrain(m *protocol.Drain) {
	s.draining = true
	sess, env := s.sess, s.env
	s.sess = nil
	s.set(protocol.StateDetached, nil)
	var pids []*actor.PID
	if s.receiver != nil {
		pids = append(pids, s.receiver)
	}
	drainThenClose(env, m, pids, sess)
}

func (s *subscription) describe(ctx actor.Context) *protocol.Described {
	n := &protocol.Node{
		Name: "subscription:" + s.spec.Name, Kind: "subscription", PID: ctx.Self().String(),
		Address: s.spec.Address.String(), State: s.state, Restarts: s.restarts + int(s.kept.panics.Load()),
		Counters: map[string]uint64{"credit": uint64(s.spec.Credit), "partitions": uint64(max(s.spec.Partitions, 1)),
			"panics": s.kept.panics.Load()},
	}
	if s.lastErr != nil {
		n.LastError = s.lastErr.Error()
	}
	var children []*actor.PID
	if s.receiver != nil {
		children = append(children, s.receiver)
	}
	children = append(children, s.dispatcher)
	return &protocol.Described{Node: n, Children: children}
}
