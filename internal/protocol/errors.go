package protocol

import (
	"errors"
	"fmt"

	"github.com/amqpactor/amqpactor/messages"
)

// ErrStopped is returned for work handed to an App that is stopping or
// stopped; the root package exports it as amqpactor.ErrStopped.
var ErrStopped = errors.New("amqpactor: app is stopped")

// ErrRequestsRestarted answers a request waiting for its reply when the
// requests actor restarted: its reply link is gone, so the reply could
// never arrive. The request may be sent again. The root package exports it
// as amqpactor.ErrRequestsRestarted.
var ErrRequestsRestarted = errors.New("amqpactor: request: the requests actor restarted; its reply link is gone")

// RemoteErrorOf returns the failure an error reply carries, without an
// address, or nil when m is an ordinary reply.
func RemoteErrorOf(m *messages.Message) *messages.RemoteError {
	if m == nil {
		return nil
	}
	v, ok := m.Headers[messages.ErrorProperty]
	if !ok {
		return nil
	}
	e := &messages.RemoteError{Reply: m, Description: text(v)}
	if c, ok := m.Headers[messages.ErrorConditionProperty]; ok {
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

// NodeError fails work that a node of the tree was to do when that node is
// gone: its supervisor stopped it (a restart budget spent, a Stop
// directive) or it failed for good. It names the node and wraps why, so a
// caller waits for nothing that cannot happen. The root package exports it
// as amqpactor.NodeError.
type NodeError struct {
	// Path is the node's path in the tree ("connection/publisher/sender:orders"),
	// Kind its kind and Address the address it served, if any.
	Path, Kind, Address string
	// Err is why the node is gone.
	Err error
}

func (e *NodeError) Error() string {
	s := "amqpactor: " + e.Path
	if e.Address != "" {
		s += " (" + e.Address + ")"
	}
	s += " is gone"
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *NodeError) Unwrap() error { return e.Err }
