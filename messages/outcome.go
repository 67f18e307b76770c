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
}

func (o Outcome) String() string {
	switch {
	case o.Kind == Modified:
		return fmt.Sprintf("modified{delivery-failed=%t, undeliverable-here=%t}", o.DeliveryFailed, o.UndeliverableHere)
	case o.Condition != "" && o.Description != "":
		return fmt.Sprintf("%s (%s: %s)", o.Kind, o.Condition, o.Description)
	case o.Condition != "":
		return fmt.Sprintf("%s (%s)", o.Kind, o.Condition)
	}
	return o.Kind.String()
}
