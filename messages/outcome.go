package messages

import "github.com/amqpactor/amqpactor/transport"

// Outcome is defined by the transport seam (which must not import this
// package); these aliases keep it, and the kinds a user reads off an
// OutcomeError, next to the Message it settles.
type (
	Outcome     = transport.Outcome
	OutcomeKind = transport.OutcomeKind
)

const (
	Accepted = transport.Accepted
	Rejected = transport.Rejected
	Released = transport.Released
	Modified = transport.Modified
)
