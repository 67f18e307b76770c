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

// The application-properties of an error reply: a responder that failed
// answers with a reply carrying both, so that its caller fails at once
// instead of waiting out its deadline. Any client can send or read them.
const (
	// ErrorProperty holds the failure's description (a string; may be empty).
	// Its presence is what makes a reply an error reply.
	ErrorProperty = "x-amqpactor-error"
	// ErrorConditionProperty holds the failure's condition, an AMQP error
	// condition symbol as a string.
	ErrorConditionProperty = "x-amqpactor-error-condition"
)

// RemoteError reports a request whose responder failed or rejected it and
// said so in an error reply (see ErrorProperty).
type RemoteError struct {
	// Address is the request's address, as in other errors (kind:name).
	Address string
	// Condition and Description are what the responder sent.
	Condition   string
	Description string
	// Reply is the error reply as it arrived (its correlation-id, any other
	// property the responder set).
	Reply *Message
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("amqpactor: request to %s: responder failed: %s: %s", e.Address, e.Condition, e.Description)
}

// RemoteErrorOf returns the failure an error reply carries, without an
// address, or nil when m is an ordinary reply.
func RemoteErrorOf(m *Message) *RemoteError {
	if m == nil {
		return nil
	}
	v, ok := m.Headers[ErrorProperty]
	if !ok {
		return nil
	}
	e := &RemoteError{Reply: m, Description: text(v)}
	if c, ok := m.Headers[ErrorConditionProperty]; ok {
		e.Condition = text(c)
	}
	return e
}

// text is an application-property as a string, whatever type the sender
// gave it.
func text(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}
