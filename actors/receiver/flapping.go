package receiver

import (
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/transport"
)

// A link the broker detaches soon after every attach (within the settled
// period, actors.Env.Settled) is flapping: each such end lengthens the
// backoff of the next attach (flaps); from the second in a row
// (shakyAfter) the next link shows degraded until it has stayed attached
// for the settled period, and the actor fails with
// an *actors.ShortLivedLink, which the default strategy counts against the
// restart budget (actors.Supervisor). Only a link that stays attached
// resets the count.

// linkFailed is why the actor fails for a link that ended with err after
// it was up for up: a *transport.LinkError, wrapped in an
// *actors.ShortLivedLink when the link did not settle. It also counts the
// flap, or forgets the earlier ones.
func (r *receiver) linkFailed(err error, up time.Duration) error {
	var le *transport.LinkError
	if !errors.As(err, &le) {
		le = &transport.LinkError{Address: r.spec.Address.String(), Op: "receive", Err: err}
	}
	if up >= r.env.Settled() {
		r.flaps, r.degraded = 0, false
		return le
	}
	r.flaps++
	return &actors.ShortLivedLink{Err: le, Up: up}
}

// backoff is the wait before the next attach: longer after each failed
// attach and each short-lived link, the longest once degraded.
func (r *receiver) backoff() time.Duration {
	if r.degraded {
		// The longest backoff less the settled period, so that a link the
		// broker stopped detaching is ready again within the longest
		// backoff.
		d := r.env.Backoff.Delay(1 << 20)
		if lim := r.env.Backoff.Longest() - r.env.Settled(); lim > 0 && d > lim {
			d = lim
		}
		return d
	}
	return r.env.Backoff.Delay(r.attempt + r.flaps + 1)
}

// shakyAfter is how many short-lived links in a row make the next one
// degraded: one detach soon after an attach (a queue deleted and declared
// again, a leader moving) is an ordinary event, two in a row are not.
const shakyAfter = 2

// shakyErr is why an attach after short-lived links is degraded, nil after
// too few.
func (r *receiver) shakyErr() error {
	if r.flaps < shakyAfter {
		return nil
	}
	return r.lastErr
}

// onSettled ends the settled period of a degraded link: the broker kept it.
func (r *receiver) onSettled(m *settledLink) {
	if m.gen != r.gen || r.link == nil || r.st != stDegraded {
		return
	}
	r.settleTimer = nil
	r.flaps, r.degraded = 0, false
	r.set(evSettled, nil)
	if r.activeKnown && !r.isActive {
		r.set(evStandby, nil)
	}
}

// onDegraded: the strategy found the short-lived links past the restart
// budget. The wait under way is replaced by the longest one.
func (r *receiver) onDegraded(ctx actor.Context, m *actors.LinkDegraded) {
	if r.degraded || r.flaps == 0 {
		return
	}
	r.degraded = true
	r.env.Log.Warn("amqpactor: the broker keeps detaching the link soon after it attaches; re-attaching at the longest backoff",
		"address", r.spec.Address.String(), "flaps", r.flaps, "error", m.Err)
	if r.link == nil && r.st == stBackoff && !r.stopping {
		r.attempt--
		r.scheduleReattachAfter(ctx, r.backoff())
	}
}

func (r *receiver) stopSettleTimer() {
	if r.settleTimer != nil {
		r.settleTimer.Stop()
		r.settleTimer = nil
	}
}
