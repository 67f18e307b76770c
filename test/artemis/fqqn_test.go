package artemis

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// TestFQQNReachesOneQueue: Queue("ADDR::QUEUE") is the fully qualified
// queue QUEUE of address ADDR. Two subscriptions by FQQN make the address
// with two anycast queues, billing and shipping; a publish to ADDR::billing
// reaches billing alone. A publish to the plain address (as a Queue, a Raw
// or a Topic alike: the address has only anycast queues) goes to one of
// the two, round robin, never to both.
func TestFQQNReachesOneQueue(t *testing.T) {
	orders := unique("orders")
	removeAddress(t, orders)
	billing, shipping := amqpactor.Queue(orders+"::billing"), amqpactor.Queue(orders+"::shipping")
	var b, s seen
	app := newApp(t, "")
	_, err := app.Subscribe(billing, b.handler)
	require.NoError(t, err)
	_, err = app.Subscribe(shipping, s.handler)
	require.NoError(t, err)
	start(t, app)
	adm := newAdmin(t)
	require.Equal(t, []string{"billing", "shipping"}, adm.queueNames(t, orders), "the subscriptions made both queues")
	for _, q := range []string{"billing", "shipping"} {
		rt, _ := adm.queue(t, q, "routingType")
		require.Equal(t, "ANYCAST", rt, "queue %s", q)
	}

	for i := range 10 {
		publish(t, app, billing, fmt.Sprintf("fq-%d", i))
	}
	eventually(t, func() bool { return b.n() >= 10 }, "billing gets what was sent to it")

	plain := []amqpactor.Address{amqpactor.Queue(orders), amqpactor.Raw(orders), amqpactor.Topic(orders)}
	var sent []string
	for _, a := range plain {
		for i := range 4 {
			id := fmt.Sprintf("%s-%d", a, i)
			sent = append(sent, id)
			publish(t, app, a, id)
		}
	}
	eventually(t, func() bool { return b.n()+s.n() >= 10+len(sent) }, "the plain-address publishes arrive")
	// A marker through FQQN, sent last, bounds the wait for a stray copy.
	publish(t, app, shipping, "marker")
	eventually(t, func() bool { return len(s.of("marker")) == 1 }, "the marker")

	for i := range 10 {
		require.Empty(t, s.of(fmt.Sprintf("fq-%d", i)), "a publish to %s reaches that queue alone", billing)
	}
	for i, a := range plain {
		got := map[string]int{}
		for _, id := range sent[i*4 : i*4+4] {
			nb, ns := len(b.of(id)), len(s.of(id))
			require.Equal(t, 1, nb+ns, "%s: one queue of the address gets it (billing %d, shipping %d)", id, nb, ns)
			if nb == 1 {
				got["billing"]++
			} else {
				got["shipping"]++
			}
		}
		require.Equal(t, map[string]int{"billing": 2, "shipping": 2}, got, "publishes to %s go round robin over the queues", a)
	}
	require.Equal(t, 10+len(sent)+1, b.n()+s.n(), "nothing handled twice")
}
