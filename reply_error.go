package amqpactor

import "github.com/amqpactor/amqpactor/messages"

// RemoteError is what App.Request returns when the responder failed: its
// function returned an error or rejected the request, and it answered with
// an error reply instead of leaving the caller to its deadline. It carries
// the request's address and the condition and description the responder
// sent. Use errors.As.
type RemoteError = messages.RemoteError

// The application-properties of an error reply (see Responder): a client
// of another library can send or read them.
const (
	ReplyErrorProperty     = messages.ErrorProperty
	ReplyConditionProperty = messages.ErrorConditionProperty
)

// CondResponderFailed is the condition of an error reply when the
// responder's function returned an error that names no AMQP condition.
const CondResponderFailed = "amqpactor:responder-failed"
