package amqpwire

import (
	"testing"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/transport"
)

func TestOutcomeOf(t *testing.T) {
	cases := []struct {
		state amqp.DeliveryState
		want  transport.Outcome
	}{
		{&amqp.StateAccepted{}, transport.Outcome{Kind: transport.Accepted}},
		{&amqp.StateRejected{}, transport.Outcome{Kind: transport.Rejected}},
		{&amqp.StateRejected{Error: &amqp.Error{Condition: amqp.ErrCondResourceLimitExceeded, Description: "queue full"}},
			transport.Outcome{Kind: transport.Rejected, Condition: "amqp:resource-limit-exceeded", Description: "queue full"}},
		{&amqp.StateReleased{}, transport.Outcome{Kind: transport.Released}},
		{&amqp.StateModified{}, transport.Outcome{Kind: transport.Modified}},
		{&amqp.StateModified{DeliveryFailed: true, UndeliverableHere: true},
			transport.Outcome{Kind: transport.Modified, DeliveryFailed: true, UndeliverableHere: true}},
	}
	for _, c := range cases {
		got, err := outcomeOf(c.state)
		if err != nil || got != c.want {
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
