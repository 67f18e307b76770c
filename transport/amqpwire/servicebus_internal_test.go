package amqpwire

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/messages"
)

// TestServiceBusOutcomes: on Service Bus no outcome is sent as
// modified{undeliverable-here}, which it reads as defer; a retry abandons
// and a rejection or an undeliverable message dead-letters with its reason
// and description.
func TestServiceBusOutcomes(t *testing.T) {
	deadLetter := func(reason, desc string) map[string]any {
		return map[string]any{sbDeadLetterReason: reason, sbDeadLetterDescription: desc}
	}
	for _, tc := range []struct {
		name string
		in   messages.Outcome
		want messages.Outcome
		info map[string]any // nil: no error on the disposition
	}{
		{"accepted", messages.Outcome{Kind: messages.Accepted}, messages.Outcome{Kind: messages.Accepted}, nil},
		{"released", messages.Outcome{Kind: messages.Released}, messages.Outcome{Kind: messages.Released}, nil},
		{"retry abandons",
			messages.Outcome{Kind: messages.Modified, DeliveryFailed: true},
			messages.Outcome{Kind: messages.Modified}, nil},
		{"undeliverable dead-letters, never defers",
			messages.Outcome{Kind: messages.Modified, DeliveryFailed: true, UndeliverableHere: true, Description: "bad tenant"},
			messages.Outcome{Kind: messages.Rejected, Condition: sbDeadLetter, Description: "bad tenant"},
			deadLetter("undeliverable", "bad tenant")},
		{"rejected dead-letters with its condition as the reason",
			messages.Outcome{Kind: messages.Rejected, Condition: "amqpactor:max-deliveries", Description: "failed 5 deliveries"},
			messages.Outcome{Kind: messages.Rejected, Condition: sbDeadLetter, Description: "failed 5 deliveries"},
			deadLetter("amqpactor:max-deliveries", "failed 5 deliveries")},
		{"rejected without a condition",
			messages.Outcome{Kind: messages.Rejected},
			messages.Outcome{Kind: messages.Rejected, Condition: sbDeadLetter},
			deadLetter("rejected", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, e := serviceBusOutcome(tc.in)
			require.Equal(t, tc.want, got)
			require.False(t, got.Kind == messages.Modified && got.UndeliverableHere, "modified{undeliverable-here} defers on Service Bus")
			if tc.info == nil {
				require.Nil(t, e)
				return
			}
			require.NotNil(t, e)
			require.EqualValues(t, sbDeadLetter, e.Condition)
			require.Equal(t, tc.info, map[string]any(e.Info))
		})
	}
}
