package address

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRender(t *testing.T) {
	for _, tc := range []struct {
		d    Dialect
		a    Address
		role Role
		want Node
	}{
		{Artemis, Queue("orders"), Send, Node{Address: "orders", Capabilities: []string{"queue"}}},
		{Artemis, Queue("orders::billing"), Receive, Node{Address: "orders::billing", Capabilities: []string{"queue"}}},
		{Artemis, Topic("events"), Send, Node{Address: "events", Capabilities: []string{"topic"}}},
		{Artemis, Topic("events"), Receive, Node{Address: "events::sub-1", Capabilities: []string{"topic", "shared", "global"},
			Durable: true, LinkName: "sub-1"}},
		{Artemis, Raw("x/y"), Send, Node{Address: "x/y"}},
		{RabbitMQ4, Queue("orders"), Send, Node{Address: "/queues/orders"}},
		{RabbitMQ4, Queue("a/c%"), Receive, Node{Address: "/queues/a%2Fc%25"}},
		{RabbitMQ4, Topic("events"), Send, Node{Address: "/exchanges/events"}},
		{RabbitMQ4, Topic("events"), Receive, Node{Address: "/queues/events.sub-1", Queue: "events.sub-1", Exchange: "events"}},
		{RabbitMQ4, Raw("/queues/x"), Receive, Node{Address: "/queues/x"}},
		{ServiceBus, Queue("orders"), Send, Node{Address: "orders"}},
		{ServiceBus, Topic("events"), Send, Node{Address: "events"}},
		{ServiceBus, Topic("events"), Receive, Node{Address: "events/subscriptions/sub-1"}},
	} {
		t.Run(tc.d.String()+"/"+tc.a.String(), func(t *testing.T) {
			got, err := Render(tc.d, tc.a, tc.role, "sub-1")
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// An ephemeral subscription is a private node: Artemis's plain topic
// address, RabbitMQ 4's queue of the same spelling (declared exclusive).
func TestRenderEphemeral(t *testing.T) {
	for _, tc := range []struct {
		d    Dialect
		a    Address
		want Node
	}{
		{Artemis, Topic("events"), Node{Address: "events", Capabilities: []string{"topic"}}},
		{Artemis, Queue("orders"), Node{Address: "orders", Capabilities: []string{"queue"}}},
		{RabbitMQ4, Topic("events"), Node{Address: "/queues/events.sub-1.x", Queue: "events.sub-1.x", Exchange: "events"}},
		{ServiceBus, Topic("events"), Node{Address: "events/subscriptions/sub-1.x"}},
	} {
		t.Run(tc.d.String()+"/"+tc.a.String(), func(t *testing.T) {
			got, err := RenderEphemeral(tc.d, tc.a, "sub-1.x")
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	// Artemis needs no name for a private node; a durable one without a
	// name is one too.
	got, err := Render(Artemis, Topic("events"), Receive, "")
	require.NoError(t, err)
	require.Equal(t, Node{Address: "events", Capabilities: []string{"topic"}}, got)
}

func TestRenderErrors(t *testing.T) {
	for _, tc := range []struct {
		d      Dialect
		a      Address
		reason string
	}{
		{Artemis, Queue(""), "empty name"},
		{Artemis, Topic("  "), "empty name"},
		{Artemis, Address{}, "unknown address kind"},
		{Artemis, Queue("a b"), "whitespace"},
		{Artemis, Queue("orders::"), "malformed fully qualified"},
		{Artemis, Queue("::billing"), "malformed fully qualified"},
		{Artemis, Queue("a::b::c"), "malformed fully qualified"},
		{Artemis, Topic("a::b"), "names a queue"},
		{RabbitMQ4, Queue("orders::billing"), "Artemis feature"},
		{ServiceBus, Queue("orders::billing"), "Artemis feature"},
	} {
		t.Run(tc.d.String()+"/"+tc.a.String(), func(t *testing.T) {
			_, err := Render(tc.d, tc.a, Send, "s")
			var ae *Error
			require.True(t, errors.As(err, &ae), "want *address.Error, got %v", err)
			require.Equal(t, tc.a, ae.Address)
			require.Contains(t, err.Error(), tc.reason)
			require.Contains(t, err.Error(), tc.a.String(), "the error names the address")
		})
	}
	_, err := Render(RabbitMQ4, Topic("events"), Receive, "")
	require.ErrorContains(t, err, "subscription name")
	_, err = Render(ServiceBus, Topic("events"), Receive, "a/b")
	require.ErrorContains(t, err, "may not contain")
	_, err = Render(Artemis, Topic("events"), Receive, "a::b")
	require.ErrorContains(t, err, "may not contain")
}
