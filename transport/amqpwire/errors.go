package amqpwire

import (
	"errors"

	"github.com/Azure/go-amqp"
)

// wireError gives an error from go-amqp a readable text while keeping it,
// and the broker's *amqp.Error inside it, reachable with errors.As.
type wireError struct {
	text string
	err  error
}

func (e *wireError) Error() string { return e.text }
func (e *wireError) Unwrap() error { return e.err }

// describe spells an error that carries the broker's *amqp.Error as
// "condition: description" (go-amqp prints the struct), saying whether the
// session or the whole connection ended. Other errors are returned as they
// are.
func describe(err error) error {
	var ae *amqp.Error
	if err == nil || !errors.As(err, &ae) {
		return err
	}
	text := string(ae.Condition)
	if ae.Description != "" {
		text += ": " + ae.Description
	}
	var se *amqp.SessionError
	var ce *amqp.ConnError
	switch {
	case errors.As(err, &ce):
		text = "connection closed by the broker: " + text
	case errors.As(err, &se):
		text = "session ended by the broker: " + text
	}
	return &wireError{text: text, err: err}
}
