package amqpwire

import (
	"reflect"
	"testing"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/messages"
)

func TestOutcomeOf(t *testing.T) {
	cases := []struct {
		state amqp.DeliveryState
		want  messages.Outcome
	}{
		{&amqp.StateAccepted{}, messages.Outcome{Kind: messages.Accepted}},
		{&amqp.StateRejected{}, messages.Outcome{Kind: messages.Rejected}},
		{&amqp.StateRejected{Error: &amqp.Error{Condition: amqp.ErrCondResourceLimitExceeded, Description: "queue full"}},
			messages.Outcome{Kind: messages.Rejected, Condition: "amqp:resource-limit-exceeded", Description: "queue full"}},
		// RabbitMQ 4.3 names the queue that refused a publish and why.
		{&amqp.StateRejected{Error: &amqp.Error{Condition: amqp.ErrCondResourceLimitExceeded,
			Info: map[string]any{"queue": "orders", "reason": "maxlen"}}},
			messages.Outcome{Kind: messages.Rejected, Condition: "amqp:resource-limit-exceeded",
				Info: map[string]any{"queue": "orders", "reason": "maxlen"}}},
		{&amqp.StateReleased{}, messages.Outcome{Kind: messages.Released}},
		{&amqp.StateModified{}, messages.Outcome{Kind: messages.Modified}},
		{&amqp.StateModified{DeliveryFailed: true, UndeliverableHere: true},
			messages.Outcome{Kind: messages.Modified, DeliveryFailed: true, UndeliverableHere: true}},
	}
	for _, c := range cases {
		got, err := outcomeOf(c.state)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("outcomeOf(%v) = %v, %v; want %v", c.state, got, err, c.want)
		}
	}
	if _, err := outcomeOf(&amqp.StateReceived{}); err == nil {
		t.Error("a non-terminal state mapped to an outcome")
	}
	if _, err := outcomeOf(nil); err == nil {
		t.Error("a nil state mapped to an outcome")
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"orders":           "orders",
		"a.b-c_d~e":        "a.b-c_d~e",
		"with space/slash": "with%20space%2Fslash",
		"ümlaut:1":         "%C3%BCmlaut%3A1",
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %q, want %q", in, got, want)
		}
	}
}
