package receiver

import (
	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/protocol"
)

// linkState is where a receiver's link is in its life. Two states show
// the same public string (String): the tree and the StateChanges keep the
// names they always had. Whether the receiver drains or stops (it never
// attaches again) is the stopping field, not a state: a draining link is
// still attached, or standing by, until its last settle.
type linkState uint8

const (
	// stNew: built, not started yet (an incarnation restarted by a
	// panic starts here too).
	stNew linkState = iota
	// stAttaching: an attach is under way.
	stAttaching
	// stAttached: a link is attached, with its pump and settler; on a
	// single-active-consumer queue, the broker made it the active one.
	stAttached
	// stStandby: attached, while the broker holds another consumer
	// active on the queue (RabbitMQ 4.3).
	stStandby
	// stDegraded: attached, but the link before this one ended soon after
	// it attached; attached (or standby) once this one has stayed up for
	// the settled period (actors.Env.Settled). Not ready meanwhile.
	stDegraded
	// stHandingOver: the pump is stopped; once what it took is settled
	// the link detaches and attaches again (balance.go).
	stHandingOver
	// stDetached: no link and no attach under way, and none scheduled
	// (a failed first attach, a drained or handed-over link).
	stDetached
	// stBackoff: waiting to attach again, by a timer of its own or by
	// its parent, which replaces the session and the receiver.
	stBackoff
	// stRestarting: this incarnation is being replaced.
	stRestarting
	// stFailed: a terminal refusal came back too often; it gave up.
	stFailed
	// stStopped: the actor has stopped.
	stStopped
)

// String is the node state the tree and the StateChanges show.
func (s linkState) String() string {
	switch s {
	case stNew:
		return ""
	case stAttaching:
		return protocol.StateAttaching
	case stAttached:
		return protocol.StateAttached
	case stStandby:
		return StateStandby
	case stDegraded:
		return StateDegraded
	case stHandingOver:
		return StateHandingOver
	case stDetached:
		return protocol.StateDetached
	case stBackoff, stRestarting:
		return protocol.StateRestarting
	case stFailed:
		return actors.StateFailed
	case stStopped:
		return protocol.StateStopped
	}
	return "invalid"
}

// linkEvent is what happened to the receiver's link.
type linkEvent uint8

const (
	evAttach       linkEvent = iota // an attach begins
	evAttached                      // an attach succeeded and its link is taken
	evAttachFailed                  // an attach failed
	evActive                        // the broker says the link is its active consumer
	evStandby                       // the broker says another consumer is active
	evHandover                      // a hand-over of the queue to another replica begins
	evDetached                      // the link ended, was drained or handed over, or an attach's link is closed unused
	evBackoff                       // it waits before attaching again
	evFail                          // it gives up
	evRestart                       // protoactor restarts the actor
	evStop                          // the actor stopped
	evShaky                         // an attach succeeded after a short-lived link
	evSettled                       // the link has stayed attached for the settled period
)

var eventNames = [...]string{"attach", "attached", "attach-failed", "active", "standby", "handover",
	"detached", "backoff", "fail", "restart", "stop", "shaky", "settled"}

func (e linkEvent) String() string { return actors.EnumName(eventNames[:], e) }

// linked reports whether s has a link.
func (s linkState) linked() bool {
	return s == stAttached || s == stStandby || s == stHandingOver || s == stDegraded
}

// on is the one place that says which transitions are legal: the state
// that ev leads to from s, or false when ev cannot happen in s (a bug).
func (s linkState) on(ev linkEvent) (linkState, bool) {
	switch ev {
	case evAttach:
		if s == stNew || s == stDetached || s == stBackoff {
			return stAttaching, true
		}
	case evAttached, evShaky, evAttachFailed:
		// An attach's answer may come after the state moved on: a dead
		// incarnation's attach answers its successor.
		if s == stAttaching || s == stDetached || s == stBackoff {
			switch ev {
			case evAttached:
				return stAttached, true
			case evShaky:
				return stDegraded, true
			}
			return stDetached, true
		}
	case evSettled:
		if s == stDegraded {
			return stAttached, true
		}
	case evActive, evStandby:
		switch s {
		case stDegraded:
			// Degraded whatever the broker says, until the link settles.
			return s, true
		case stAttached, stStandby:
			if ev == evActive {
				return stAttached, true
			}
			return stStandby, true
		case stHandingOver:
			// Handing over whatever the broker says, until it detaches.
			return s, true
		}
	case evHandover:
		if s == stAttached || s == stStandby || s == stDegraded {
			return stHandingOver, true
		}
	case evDetached:
		if s.linked() || s == stAttaching {
			return stDetached, true
		}
	case evBackoff:
		// From stBackoff: the next incarnation waits out the backoff its
		// predecessor began.
		if s == stDetached || s == stBackoff {
			return stBackoff, true
		}
	case evFail:
		if s == stDetached {
			return stFailed, true
		}
	case evRestart:
		return actors.OnRestart(s, stRestarting, stStopped)
	case evStop:
		return actors.OnStop(s, stStopped)
	}
	return s, false
}

// set moves the receiver's state on ev (linkState.on) and reports a change
// of its public name (see actors.Env.SetState). An illegal transition is a
// bug of this package: it is logged at Error and the state kept, since a panic
// would restart the receiver (and its link) for bookkeeping.
func (r *receiver) set(ev linkEvent, err error) bool {
	to, ok := r.st.on(ev)
	if !ok {
		r.env.Log.Error("amqpactor: receiver: illegal state transition", "address", r.spec.Address.String(),
			"state", r.st.String(), "event", ev.String())
		return false
	}
	from := r.st.String()
	r.st = to
	n := actors.SpecNode(r.spec).Child("receiver", "receiver", r.spec.Address.String())
	r.env.SetState(&from, n, to.String(), err)
	return true
}

// showActive shows what the broker said of the link's activity (see
// linkActive.said): RabbitMQ 4.3 says whether this replica consumes the
// partition queue or stands by.
func (r *receiver) showActive(said int32) {
	switch said {
	case 1:
		r.activeKnown, r.isActive = true, true
		r.set(evActive, nil)
	case 2:
		r.activeKnown, r.isActive = true, false
		r.set(evStandby, nil)
	}
}
