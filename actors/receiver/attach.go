package receiver

import (
	"context"
	"errors"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// Attaching the link, and attaching it again after a backoff when it ends:
// a detached link is a failure of the actor, which its parent's strategy
// decides (actors.Supervisor); a lost session is the parent's to replace.

func sessionEnded(err error) bool {
	var se *amqp.SessionError
	return errors.As(err, &se)
}

func (r *receiver) opts(self *actor.PID, la *linkActive) (transport.ReceiverOptions, uint64) {
	node := r.spec.Node
	if node == "" {
		node = r.spec.Name
	}
	o := transport.ReceiverOptions{
		Address:      r.spec.Address,
		Subscription: node,
		Ephemeral:    r.spec.Ephemeral,
		Settled:      r.spec.Settled,
		Credit:       r.spec.Credit,
		ClassicQueue: r.spec.Classic,
		BindingKeys:  r.spec.BindingKeys,

		QueueArguments: r.spec.QueueArguments,
		DeadLetter:     r.spec.DeadLetter,
		DeliveryLimit:  r.spec.DeliveryLimit,
	}
	if !r.spec.Settled {
		// The broker may take back a delivery a handler still holds
		// (RabbitMQ 4.3 at a quorum queue's consumer timeout): counted and
		// told here; the handler's outcome for it is dropped when it comes.
		counters, log, addr := r.Counters, r.env.Log, r.spec.Address.String()
		o.OnBrokerSettled = func(oc messages.Outcome) {
			counters.BrokerSettled.Add(1)
			log.Warn("amqpactor: the broker settled a delivery a handler still holds (consumer timeout?)",
				"address", addr, "outcome", oc.String())
		}
	}
	var stream uint64
	if c := r.spec.Stream; c != nil {
		// Each link starts where the ones before stopped being settled.
		o.StreamOffset, stream = c.Begin()
		o.StreamFilter = c.Filter()
	}
	if r.spec.Address.SingleActiveConsumer() {
		// A partition queue: the broker may say whether this replica is
		// its active consumer (RabbitMQ 4.3).
		root := r.env.Root
		o.OnActive = func(active bool) {
			if active {
				la.said.Store(1)
			} else {
				la.said.Store(2)
			}
			root.Send(self, &activeChanged{link: la, active: active})
		}
	}
	return o, stream
}

func (r *receiver) attach(ctx actor.Context, attempt int) {
	if !r.set(evAttach, nil) {
		return
	}
	la := &linkActive{}
	opts, stream := r.opts(ctx.Self(), la)
	self, sess, env, prev := ctx.Self(), r.sess, r.env, r.kept.closed
	var caller context.Context
	if r.gen == 0 && !r.replacement {
		// The first attach: Start's or Subscribe's context bounds it too.
		caller = r.spec.AttachCtx
	}
	env.Go(func() {
		actx, cancel := env.AttachCtx(caller)
		defer cancel()
		if prev != nil {
			select {
			case <-prev:
			case <-actx.Done():
			}
		}
		link, err := sess.NewReceiver(actx, opts)
		env.Root.Send(self, &attachResult{attempt: attempt, link: link, err: err, active: la, stream: stream})
	})
}

func (r *receiver) onAttach(ctx actor.Context, m *attachResult) {
	if m.err != nil {
		if r.link == nil {
			r.set(evAttachFailed, m.err)
		}
		r.lastErr = m.err
		r.env.Log.Warn("amqpactor: attach failed", "address", r.spec.Address.String(), "error", m.err)
		if r.link != nil {
			return // an attach of a dead incarnation; this one has a link
		}
		if (r.gen == 0 && !r.replacement) || r.stopping {
			// The first attach decides Start: its error goes to the
			// caller, who gives up on this subscription.
			ctx.Send(ctx.Parent(), &Attached{Err: m.err})
			return
		}
		if sessionEnded(m.err) {
			// The parent counts terminal refusals across sessions.
			r.set(evBackoff, m.err)
			ctx.Send(ctx.Parent(), &SessionLost{Err: m.err})
			return
		}
		if actors.Terminal(m.err) {
			r.terminal++
			if r.terminal > actors.TerminalRetries {
				r.set(evFail, m.err)
				r.env.Log.Error("amqpactor: receiver gave up re-attaching", "address", r.spec.Address.String(),
					"attempts", r.terminal, "error", m.err)
				ctx.Send(ctx.Parent(), &Attached{Err: m.err, Failed: true})
				return
			}
			r.scheduleReattachAfter(ctx, r.env.Backoff.Delay(1<<20))
			return
		}
		if r.attempt >= actors.EscalateAfter {
			// Re-attaching on this session keeps failing: escalate, the
			// parent replaces the session and this receiver.
			r.env.Log.Warn("amqpactor: re-attach keeps failing; replacing the session", "address", r.spec.Address.String(),
				"attempts", r.attempt, "error", m.err)
			r.set(evBackoff, m.err)
			ctx.Send(ctx.Parent(), &SessionLost{Err: m.err})
			return
		}
		r.scheduleReattach(ctx)
		return
	}
	if r.stopping || r.link != nil {
		// Stopping, or a link already attached (an attach of a dead
		// incarnation answered this one): never two pumps.
		r.closeLink(m.link, context.Background(), nil)
		if r.link == nil && r.st == stAttaching {
			r.set(evDetached, nil) // drained while it attached
		}
		return
	}
	ev := evAttached
	if r.flaps >= shakyAfter {
		// The last links ended soon after they attached: this one is not
		// trusted (nor ready) until it has stayed attached a while.
		ev = evShaky
	}
	if !r.set(ev, r.shakyErr()) {
		r.closeLink(m.link, context.Background(), nil)
		return
	}
	r.link = m.link
	r.attachedAt = time.Now()
	r.active, r.activeKnown, r.isActive = m.active, false, false
	r.gen = r.env.Gen()
	r.attempt, r.terminal = 0, 0
	if ev == evShaky {
		r.stopSettleTimer()
		r.settleTimer = r.env.After(r.env.Settled(), ctx.Self(), &settledLink{gen: r.gen})
	}
	if m.active != nil {
		r.showActive(m.active.said.Load())
	}
	r.joinBalance(ctx, m.active)
	r.startLink(ctx.Self(), m.stream)
	ctx.Send(ctx.Parent(), &Attached{})
}

func (r *receiver) onLinkEnded(ctx actor.Context, m *linkEnded) {
	if m.link != r.gen || r.link == nil {
		return
	}
	r.lastErr = m.err
	r.env.Log.Warn("amqpactor: link ended", "address", r.spec.Address.String(), "error", m.err)
	up := time.Since(r.attachedAt)
	r.endLink(context.Background(), m.err)
	if r.stopping || r.drain != nil {
		r.finishDrain(m.err)
		return
	}
	r.restarts++
	if sessionEnded(m.err) {
		r.set(evBackoff, m.err)
		ctx.Send(ctx.Parent(), &SessionLost{Err: m.err})
		return
	}
	// A detached link is a failure of this actor, which its parent's
	// strategy decides (by default: restart, and the next incarnation
	// re-attaches after a backoff; see actors.Supervisor).
	r.set(evBackoff, m.err)
	why := r.linkFailed(m.err, up)
	d := &detachedLink{err: m.err, restarts: r.restarts, attempt: r.attempt, state: r.st,
		flaps: r.flaps, degraded: r.degraded}
	r.kept.detached = d
	// Behind the failure in the mailbox: should the strategy resume this
	// incarnation instead of restarting it, this re-attaches.
	ctx.Send(ctx.Self(), &afterFailure{d: d})
	panic(why)
}

// scheduleReattach is the supervision of a detached link: re-attach with
// backoff on the same session; if the session itself is gone the parent
// replaces us.
func (r *receiver) scheduleReattach(ctx actor.Context) {
	r.scheduleReattachAfter(ctx, r.backoff())
}

func (r *receiver) scheduleReattachAfter(ctx actor.Context, d time.Duration) {
	r.set(evBackoff, r.lastErr)
	r.attempt++
	if r.timer != nil {
		r.timer.Stop() // a backoff this one replaces
	}
	r.timer = r.env.After(d, ctx.Self(), &reattach{attempt: r.attempt})
}
