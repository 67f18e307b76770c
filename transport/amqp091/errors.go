package amqp091

import (
	"context"
	"errors"
	"fmt"

	"github.com/Azure/go-amqp"
	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/amqpactor/amqpactor/transport"
)

// conditions maps the reply codes of AMQP 0-9-1 to the AMQP 1.0 error
// conditions the actors already understand (actors.Terminal treats
// not-found and unauthorized-access as refusals retrying cannot cure).
var conditions = map[int]amqp.ErrCond{
	rmq.ContentTooLarge:    amqp.ErrCondMessageSizeExceeded,
	rmq.NoRoute:            amqp.ErrCondNotFound,
	rmq.NoConsumers:        amqp.ErrCondNotFound,
	rmq.ConnectionForced:   amqp.ErrCondConnectionForced,
	rmq.InvalidPath:        amqp.ErrCondNotFound,
	rmq.AccessRefused:      amqp.ErrCondUnauthorizedAccess,
	rmq.NotFound:           amqp.ErrCondNotFound,
	rmq.ResourceLocked:     amqp.ErrCondResourceLocked,
	rmq.PreconditionFailed: amqp.ErrCondPreconditionFailed,
	rmq.FrameError:         amqp.ErrCondFramingError,
	rmq.SyntaxError:        amqp.ErrCondDecodeError,
	rmq.CommandInvalid:     amqp.ErrCondNotAllowed,
	rmq.ChannelError:       amqp.ErrCondNotAllowed,
	rmq.UnexpectedFrame:    amqp.ErrCondFramingError,
	rmq.ResourceError:      amqp.ErrCondResourceLimitExceeded,
	rmq.NotAllowed:         amqp.ErrCondNotAllowed,
	rmq.NotImplemented:     amqp.ErrCondNotImplemented,
	rmq.InternalError:      amqp.ErrCondInternalError,
}

// remoteError is the broker's reply code and text as the *amqp.Error the
// actors look for (actors.Refused, actors.Terminal).
func remoteError(e *rmq.Error) *amqp.Error {
	cond, ok := conditions[e.Code]
	if !ok {
		cond = amqp.ErrCondInternalError
	}
	return &amqp.Error{Condition: cond, Description: fmt.Sprintf("%d %s", e.Code, e.Reason)}
}

// lost turns an error of amqp091-go into the error the actors treat as the
// loss of a session (a channel) or of the connection: a *amqp.SessionError
// or *amqp.ConnError from go-amqp, with the broker's reply code and text
// as its RemoteErr when the broker closed it. connDown says whether the
// connection itself has ended. The original error stays reachable.
func lost(err error, connDown bool) error {
	if err == nil {
		return nil
	}
	var re *rmq.Error
	isRemote := errors.As(err, &re) && re.Server
	var base error
	switch {
	case connDown || (isRemote && connectionLevel(re.Code)):
		ce := &amqp.ConnError{}
		if isRemote {
			ce.RemoteErr = remoteError(re)
		}
		base = ce
	default:
		se := &amqp.SessionError{}
		if isRemote {
			se.RemoteErr = remoteError(re)
		}
		base = se
	}
	return &wrapped{text: describe(err, base), base: base, err: err}
}

// connectionLevel reports the reply codes the broker closes the whole
// connection with (AMQP 0-9-1 section 1.2: the hard errors).
func connectionLevel(code int) bool {
	switch code {
	case rmq.ConnectionForced, rmq.InvalidPath, rmq.FrameError, rmq.SyntaxError, rmq.CommandInvalid,
		rmq.ChannelError, rmq.UnexpectedFrame, rmq.ResourceError, rmq.NotAllowed, rmq.NotImplemented, rmq.InternalError:
		return true
	}
	return false
}

func describe(err error, base error) string {
	var re *rmq.Error
	text := err.Error()
	if errors.As(err, &re) {
		text = fmt.Sprintf("%d %s", re.Code, re.Reason)
	}
	switch base.(type) {
	case *amqp.ConnError:
		return "connection closed: " + text
	default:
		return "channel closed: " + text
	}
}

// wrapped keeps both the go-amqp error the actors test for and the
// original error of amqp091-go reachable with errors.As.
type wrapped struct {
	text string
	base error
	err  error
}

func (e *wrapped) Error() string   { return e.text }
func (e *wrapped) Unwrap() []error { return []error{e.base, e.err} }

// linkError wraps err for the address, as amqpwire does: a context error is
// the caller giving up, not the link failing.
func linkError(ctx context.Context, addr, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctx != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("amqpactor: %s %s: %w", op, addr, err)
	}
	return &transport.LinkError{Address: addr, Op: op, Err: err}
}
