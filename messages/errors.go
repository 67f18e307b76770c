package messages

import "fmt"

// OutcomeError reports a publish the broker did not accept: rejected,
// released or modified. It carries the outcome (with the broker's condition,
// description and info) and names the address, and the queue that refused
// and why when the broker says (RabbitMQ 4.3).
type OutcomeError struct {
	Address string
	Outcome Outcome
}

// Queue is the queue that refused the publish, as the broker named it in
// the rejected outcome's info, or "".
func (e *OutcomeError) Queue() string { return e.Outcome.Queue() }

// Reason is why the broker refused the publish ("maxlen", "unavailable"),
// from the rejected outcome's info, or "".
func (e *OutcomeError) Reason() string { return e.Outcome.Reason() }

func (e *OutcomeError) Error() string {
	return fmt.Sprintf("amqpactor: publish to %s: broker answered %s", e.Address, e.Outcome)
}

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
