package messages

import (
	"errors"
	"fmt"
)

// OutcomeError reports a publish the broker did not accept: rejected,
// released or modified. It carries the outcome (with the broker's condition
// and description) and names the address.
type OutcomeError struct {
	Address string
	Outcome Outcome
}

func (e *OutcomeError) Error() string {
	return fmt.Sprintf("amqpactor: publish to %s: broker answered %s", e.Address, e.Outcome)
}

// ErrStopped is returned for work handed to an App that is stopping or stopped.
var ErrStopped = errors.New("amqpactor: app is stopped")

// ErrRequestsRestarted answers a request waiting for its reply when the
// requests actor restarted: its reply link is gone, so the reply could
// never arrive. The request may be sent again.
var ErrRequestsRestarted = errors.New("amqpactor: request: the requests actor restarted; its reply link is gone")
