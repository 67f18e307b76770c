package amqpwire

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/transport"
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
		in   transport.Outcome
		want transport.Outcome
		info map[string]any // nil: no error on the disposition
	}{
		{"accepted", transport.Outcome{Kind: transport.Accepted}, transport.Outcome{Kind: transport.Accepted}, nil},
		{"released", transport.Outcome{Kind: transport.Released}, transport.Outcome{Kind: transport.Released}, nil},
		{"retry abandons",
			transport.Outcome{Kind: transport.Modified, DeliveryFailed: true},
			transport.Outcome{Kind: transport.Modified}, nil},
		{"undeliverable dead-letters, never defers",
			transport.Outcome{Kind: transport.Modified, DeliveryFailed: true, UndeliverableHere: true, Description: "bad tenant"},
			transport.Outcome{Kind: transport.Rejected, Condition: sbDeadLetter, Description: "bad tenant"},
			deadLetter("undeliverable", "bad tenant")},
		{"rejected dead-letters with its condition as the reason",
			transport.Outcome{Kind: transport.Rejected, Condition: "amqpactor:max-deliveries", Description: "failed 5 deliveries"},
			transport.Outcome{Kind: transport.Rejected, Condition: sbDeadLetter, Description: "failed 5 deliveries"},
			deadLetter("amqpactor:max-deliveries", "failed 5 deliveries")},
		{"rejected without a condition",
			transport.Outcome{Kind: transport.Rejected},
			transport.Outcome{Kind: transport.Rejected, Condition: sbDeadLetter},
			deadLetter("rejected", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, e := serviceBusOutcome(tc.in)
			require.Equal(t, tc.want, got)
			require.False(t, got.Kind == transport.Modified && got.UndeliverableHere, "modified{undeliverable-here} defers on Service Bus")
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
