package amqpwire

import (
	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/messages"
)

// Service Bus gives dispositions meanings of its own: modified with
// undeliverable-here defers a message (hidden until fetched by its
// sequence number, which this runtime never does), and rejected with the
// condition below dead-letters it with the reason and description read
// from the error's info. Its own SDK abandons with modified and neither
// flag set; the delivery count goes up all the same.
const (
	sbDeadLetter            = "com.microsoft:dead-letter"
	sbDeadLetterReason      = "DeadLetterReason"
	sbDeadLetterDescription = "DeadLetterErrorDescription"
)

// serviceBusOutcome is what settles o on Service Bus, with the error a
// rejected outcome carries: a failure to retry abandons (modified, no
// flags), and a rejection or an outcome that must not come back to this
// receiver dead-letters, since Service Bus cannot keep a message from one
// receiver alone and deferring would hide it. Accepted and released are
// as the spec has them.
func serviceBusOutcome(o messages.Outcome) (messages.Outcome, *amqp.Error) {
	switch {
	case o.Kind == messages.Modified && o.UndeliverableHere:
		reason := "undeliverable"
		return messages.Outcome{Kind: messages.Rejected, Condition: sbDeadLetter, Description: o.Description},
			sbDeadLetterError(reason, o.Description)
	case o.Kind == messages.Modified:
		return messages.Outcome{Kind: messages.Modified}, nil
	case o.Kind == messages.Rejected:
		reason := o.Condition
		if reason == "" {
			reason = "rejected"
		}
		return messages.Outcome{Kind: messages.Rejected, Condition: sbDeadLetter, Description: o.Description},
			sbDeadLetterError(reason, o.Description)
	}
	return o, nil
}

func sbDeadLetterError(reason, description string) *amqp.Error {
	return &amqp.Error{Condition: sbDeadLetter, Description: description,
		Info: map[string]any{sbDeadLetterReason: reason, sbDeadLetterDescription: description}}
}
