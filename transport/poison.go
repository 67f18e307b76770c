package transport

import (
	"fmt"

	"github.com/Azure/go-amqp"
)

// PoisonAnnotation is the delivery-annotation key that marks a poison
// message: a delivery whose payload was not safe to decode (it failed the
// inbound check, or was larger than the connection's max message size). The
// transport hands such a delivery on in place of the original, as a small
// message whose only content is this annotation, with the reason as a string
// value; the original payload is never decoded.
//
// The runtime never hands a poison message to a handler: it settles it
// rejected with amqp:decode-error and the reason. A message that arrives with
// this annotation already set by a peer is treated the same way, so the mark
// cannot be used to smuggle anything past the check.
const PoisonAnnotation = "x-amqpactor-poison"

// Poison reports whether m is a poison message (see PoisonAnnotation) and
// why. The reason is the annotation's value; a value that is not a non-empty
// string (possible only when a peer set the key) gets a reason that says so.
func Poison(m *amqp.Message) (reason string, ok bool) {
	if m == nil || len(m.DeliveryAnnotations) == 0 {
		return "", false
	}
	v, ok := m.DeliveryAnnotations[PoisonAnnotation]
	if !ok {
		// go-amqp decodes a symbol key as a string; a peer may also have
		// sent the key as a symbol value of its own type.
		v, ok = m.DeliveryAnnotations[amqp.Symbol(PoisonAnnotation)]
	}
	if !ok {
		return "", false
	}
	if s, isString := v.(string); isString && s != "" {
		return s, true
	}
	return fmt.Sprintf("the delivery-annotation %s holds a %T", PoisonAnnotation, v), true
}
