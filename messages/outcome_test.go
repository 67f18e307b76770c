package messages_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/amqpactor/amqpactor/messages"
)

// A refused publish names the queue that refused it and why, when the
// broker says (RabbitMQ 4.3's rejected outcome info), and reads as before
// when it does not.
func TestOutcomeErrorNamesQueueAndReason(t *testing.T) {
	var err error = &messages.OutcomeError{Address: "queue:orders", Outcome: messages.Outcome{
		Kind: messages.Rejected, Condition: "amqp:resource-limit-exceeded",
		Info: map[string]any{messages.InfoQueue: "orders", messages.InfoReason: "maxlen"},
	}}
	var oe *messages.OutcomeError
	if !errors.As(err, &oe) {
		t.Fatal("not an OutcomeError")
	}
	if oe.Queue() != "orders" || oe.Reason() != "maxlen" {
		t.Errorf("Queue() = %q, Reason() = %q; want orders, maxlen", oe.Queue(), oe.Reason())
	}
	for _, want := range []string{"queue:orders", "rejected", "amqp:resource-limit-exceeded", `queue "orders"`, "maxlen"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err.Error(), want)
		}
	}

	plain := &messages.OutcomeError{Address: "queue:orders", Outcome: messages.Outcome{
		Kind: messages.Rejected, Condition: "amqp:resource-limit-exceeded", Description: "full"}}
	if got, want := plain.Error(), "amqpactor: publish to queue:orders: broker answered rejected (amqp:resource-limit-exceeded: full)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if plain.Queue() != "" || plain.Reason() != "" {
		t.Errorf("no info, yet Queue() = %q, Reason() = %q", plain.Queue(), plain.Reason())
	}
}
