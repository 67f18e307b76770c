package artemis

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/harness"
)

// TestRawWithSubscriber: 20 messages published to Raw("x"), which has a
// subscriber, are all delivered, once each. Without a capability Artemis
// makes x a multicast address, and the subscriber's receiver a
// subscription queue of its own on it.
func TestRawWithSubscriber(t *testing.T) {
	x := amqpactor.Raw(unique("raw"))
	removeAddress(t, x.Name())
	var got seen
	app := newApp(t, "")
	_, err := app.Subscribe(x, got.handler)
	require.NoError(t, err)
	start(t, app)
	ids := harness.IDs("raw", 20)
	for _, id := range ids {
		publish(t, app, x, id)
	}
	eventually(t, func() bool { return got.n() >= len(ids) }, "every message delivered")
	require.ElementsMatch(t, ids, got.order(), "each once")
	require.Equal(t, "MULTICAST", routingTypes(t, newAdmin(t), x.Name()))
}

// TestRawWithoutQueueIsDropped: a publish to a Raw address that has no
// queue is accepted (Publish returns nil) and dropped: Artemis 2.40
// auto-creates the address, with no capability as MULTICAST, and a
// multicast address with no subscription queue routes the message
// nowhere. A subscriber attached afterwards gets nothing of it: the marker
// published after the attach is the first thing it sees.
func TestRawWithoutQueueIsDropped(t *testing.T) {
	y := amqpactor.Raw(unique("raw.nowhere"))
	removeAddress(t, y.Name())
	app := newApp(t, "")
	start(t, app)
	for i := range 5 {
		publish(t, app, y, fmt.Sprintf("unrouted-%d", i))
	}
	adm := newAdmin(t)
	require.Equal(t, "MULTICAST", routingTypes(t, adm, y.Name()), "the address Artemis made for the publish")
	require.Empty(t, adm.queueNames(t, y.Name()), "no queue holds the publishes")

	var got seen
	_, err := app.Subscribe(y, got.handler)
	require.NoError(t, err)
	publish(t, app, y, "marker")
	eventually(t, func() bool { return got.n() >= 1 }, "the marker")
	// The subscriber has had the marker, sent after every unrouted
	// publish; anything kept for it would have come first.
	require.Equal(t, []string{"marker"}, got.order(), "the unrouted publishes were dropped")
}

// routingTypes reads the routing types of the address name, as Artemis
// lists them ("MULTICAST", "ANYCAST", or both, comma separated).
func routingTypes(t *testing.T, a *admin, name string) string {
	t.Helper()
	v, err := a.m.Attribute(bound(t), "address."+name, "routingTypes")
	require.NoError(t, err)
	vs, ok := v.([]any)
	require.True(t, ok, "routingTypes of %s: %v", name, v)
	out := make([]string, len(vs))
	for i, x := range vs {
		out[i] = fmt.Sprint(x)
	}
	return strings.Join(out, ",")
}
