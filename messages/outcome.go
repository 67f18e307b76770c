package messages

import "fmt"

// OutcomeKind is one of the AMQP 1.0 terminal delivery states.
type OutcomeKind uint8

const (
	Accepted OutcomeKind = iota + 1
	Rejected
	Released
	Modified
)

func (k OutcomeKind) String() string {
	switch k {
	case Accepted:
		return "accepted"
	case Rejected:
		return "rejected"
	case Released:
		return "released"
	case Modified:
		return "modified"
	}
	return "unknown"
}

// Outcome is how a delivery was settled. Condition and Description carry the
// error of a rejected outcome (or the broker's error on a refused publish).
// It is the module's one outcome type: handlers' results become one, the
// transports settle with it and report it, and OutcomeError carries it.
type Outcome struct {
	Kind              OutcomeKind
	Condition         string
	Description       string
	DeliveryFailed    bool
	UndeliverableHere bool
	// Info is the info map of a rejected outcome's error, as the broker
	// sent it (nil when it sent none). RabbitMQ 4.3 names the queue that
	// refused a publish and why: InfoQueue and InfoReason.
	Info map[string]any
}

// The keys RabbitMQ 4.3 sets in a rejected outcome's info map.
const (
	// InfoQueue is the name of the queue that refused the message.
	InfoQueue = "queue"
	// InfoReason is why: "maxlen" (the queue is full and rejects
	// publishes) or "unavailable" (the queue has no leader, say).
	InfoReason = "reason"
)

// Queue is the queue the broker names in the rejected outcome's info
// (InfoQueue), or "".
func (o Outcome) Queue() string { return infoString(o.Info, InfoQueue) }

// Reason is why the broker refused the message, from the rejected
// outcome's info (InfoReason: "maxlen", "unavailable"), or "".
func (o Outcome) Reason() string { return infoString(o.Info, InfoReason) }

// infoString reads key of info as text: brokers send strings or symbols,
// which the codec may hand over as a named string type.
func infoString(info map[string]any, key string) string {
	switch v := info[key].(type) {
	case nil:
		return ""
	case string:
		return v
	case fmt.Stringer:
		return v.String()
	default:
		return fmt.Sprint(v)
	}
}

func (o Outcome) String() string {
	switch {
	case o.Kind == Modified:
		return fmt.Sprintf("modified{delivery-failed=%t, undeliverable-here=%t}", o.DeliveryFailed, o.UndeliverableHere)
	case o.Condition != "" && o.Description != "":
		return fmt.Sprintf("%s (%s: %s)%s", o.Kind, o.Condition, o.Description, o.infoText())
	case o.Condition != "":
		return fmt.Sprintf("%s (%s)%s", o.Kind, o.Condition, o.infoText())
	}
	return o.Kind.String() + o.infoText()
}

// infoText names the queue and the reason of a rejection, when the broker
// gave them, so that an error says which queue refused and why.
func (o Outcome) infoText() string {
	q, r := o.Queue(), o.Reason()
	switch {
	case q != "" && r != "":
		return fmt.Sprintf(" by queue %q: %s", q, r)
	case q != "":
		return fmt.Sprintf(" by queue %q", q)
	case r != "":
		return ": " + r
	}
	return ""
}
