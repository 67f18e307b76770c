package sender

import (
	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/protocol"
)

// linkState is where a sender's link is in its life. Several states show
// the same public string (String): the tree and the StateChanges keep the
// names they always had, while Receive knows, for instance, a refused
// attach from a link that simply ended.
type linkState uint8

const (
	// stNew: built, not started yet (an incarnation restarted by a
	// panic starts here too).
	stNew linkState = iota
	// stDetached: no link and no attach under way; it attaches on the
	// next publish, or on the next session if it had a link.
	stDetached
	// stRefused: the broker refused the last attach; publishes within
	// its backoff hear the same refusal (the refusal and refusedUntil
	// fields) rather than ask the broker again.
	stRefused
	// stAttaching: an attach is under way (the attaching field names
	// its session).
	stAttaching
	// stAttached: a link is attached, with its writer and confirmer.
	stAttached
	// stBackoff: waiting to attach again, by a retry timer, or for a new
	// session after a transient failure, or as the next incarnation of a
	// sender whose link ended with publishes waiting.
	stBackoff
	// stRestarting: this incarnation is being replaced (a panic, or a
	// link that ended with publishes waiting); it hands everything on.
	stRestarting
	// stRetiring: retiring (see the package documentation); it never
	// attaches again.
	stRetiring
	// stStopped: the actor has stopped.
	stStopped
)

// String is the node state the tree and the StateChanges show.
func (s linkState) String() string {
	switch s {
	case stNew:
		return ""
	case stDetached, stRefused:
		return protocol.StateDetached
	case stAttaching:
		return protocol.StateAttaching
	case stAttached:
		return protocol.StateAttached
	case stBackoff, stRestarting:
		return protocol.StateRestarting
	case stRetiring:
		return StateRetiring
	case stStopped:
		return protocol.StateStopped
	}
	return "invalid"
}

// linkEvent is what happened to the sender's link.
type linkEvent uint8

const (
	evStart        linkEvent = iota // the actor started
	evAttach                        // an attach begins
	evAttached                      // an attach succeeded and its link is taken
	evAttachFailed                  // an attach failed
	evRefused                       // ... and the failure was the broker's refusal
	evBackoff                       // it waits before attaching again
	evDetached                      // the link ended or was let go, or an attach's link is closed unused
	evRetire                        // the retirement begins
	evRestart                       // protoactor restarts the actor
	evStop                          // the actor stopped
)

var eventNames = [...]string{"start", "attach", "attached", "attach-failed", "refused", "backoff",
	"detached", "retire", "restart", "stop"}

func (e linkEvent) String() string { return actors.EnumName(eventNames[:], e) }

// unlinked reports whether s has no link and may attach.
func (s linkState) unlinked() bool {
	return s == stDetached || s == stRefused || s == stBackoff
}

// on is the one place that says which transitions are legal: the state
// that ev leads to from s, or false when ev cannot happen in s (a bug).
func (s linkState) on(ev linkEvent) (linkState, bool) {
	switch ev {
	case evStart:
		if s == stNew {
			return stDetached, true
		}
	case evAttach:
		// From stAttaching: an attach on a new session while the old
		// session's answer is still to come (two on one session never).
		if s.unlinked() || s == stAttaching {
			return stAttaching, true
		}
	case evAttached, evAttachFailed:
		// An attach's answer may come after the state moved on: a
		// predecessor's attach answers its successor, which may have
		// begun (and lost) an attach of its own meanwhile.
		if s == stAttaching || s.unlinked() {
			if ev == evAttached {
				return stAttached, true
			}
			return stDetached, true
		}
	case evRefused:
		if s == stDetached {
			return stRefused, true
		}
	case evBackoff:
		if s == stDetached {
			return stBackoff, true
		}
	case evDetached:
		if s == stAttached || s == stAttaching {
			return stDetached, true
		}
	case evRetire:
		if s == stAttaching || s == stAttached || s.unlinked() {
			return stRetiring, true
		}
	case evRestart:
		return actors.OnRestart(s, stRestarting, stStopped)
	case evStop:
		return actors.OnStop(s, stStopped)
	}
	return s, false
}
