package amqpwire

import (
	"testing"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
)

// TestAnonymousRelayFromTheOpen: the relay is used only where the peer's
// open offered it, whatever the dialect says of its broker.
func TestAnonymousRelayFromTheOpen(t *testing.T) {
	for _, d := range []address.Dialect{address.RabbitMQ4, address.Artemis, address.ServiceBus} {
		if (&Conn{dialect: d}).Features().AnonymousRelay {
			t.Errorf("%s: AnonymousRelay without an open that offers it", d)
		}
		offered := &Conn{dialect: d, guard: &guard{peerCaps: []string{"SOLE-CONNECTION-FOR-CONTAINER", "ANONYMOUS-RELAY"}}}
		if !offered.Features().AnonymousRelay {
			t.Errorf("%s: no AnonymousRelay although the open offered it", d)
		}
	}
}

// TestAddressed: each dialect's spelling of properties.to on the anonymous
// terminus, on a copy that leaves the caller's message as it was.
func TestAddressed(t *testing.T) {
	for _, tc := range []struct {
		d    address.Dialect
		a    address.Address
		to   string
		dest any // x-opt-jms-dest, nil: none
	}{
		{address.RabbitMQ4, address.Queue("orders"), "/queues/orders", nil},
		{address.RabbitMQ4, address.Queue("a/c"), "/queues/a%2Fc", nil},
		// A topic routes by the subject, the message's routing key.
		{address.RabbitMQ4, address.Topic("events"), "/exchanges/events/someone-else", nil},
		{address.RabbitMQ4, address.Raw("/queues/amqpactor.reply.x"), "/queues/amqpactor.reply.x", nil},
		{address.Artemis, address.Queue("orders"), "orders", int8(0)},
		{address.Artemis, address.Topic("events"), "events", int8(1)},
		{address.Artemis, address.Raw("x"), "x", nil},
		{address.ServiceBus, address.Queue("orders"), "orders", nil},
	} {
		to := "someone-else"
		m := amqp.NewMessage([]byte("x"))
		m.Properties = &amqp.MessageProperties{To: &to, Subject: &to}
		m.Annotations = amqp.Annotations{"keep": "me"}
		cp, err := addressed(tc.d, tc.a, m)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.d, tc.a, err)
		}
		if got := *cp.Properties.To; got != tc.to {
			t.Errorf("%s %s: to %q, want %q", tc.d, tc.a, got, tc.to)
		}
		if *cp.Properties.Subject != to || cp.Annotations["keep"] != "me" {
			t.Errorf("%s %s: the other fields were not kept", tc.d, tc.a)
		}
		if got := cp.Annotations[jmsDest]; got != tc.dest {
			t.Errorf("%s %s: %s %v, want %v", tc.d, tc.a, jmsDest, got, tc.dest)
		}
		if *m.Properties.To != "someone-else" || len(m.Annotations) != 1 {
			t.Errorf("%s %s: the caller's message changed", tc.d, tc.a)
		}
	}
	if _, err := addressed(address.RabbitMQ4, address.Queue("a::b"), amqp.NewMessage(nil)); err == nil {
		t.Error("a form the dialect cannot spell is an error")
	}
}

// TestByKey: a RabbitMQ 4 topic's address on the anonymous terminus carries
// the subject as the routing key, percent-encoded; no subject, or an empty
// one, is the empty routing key.
func TestByKey(t *testing.T) {
	subject := func(s string) *amqp.Message {
		m := amqp.NewMessage(nil)
		m.Properties = &amqp.MessageProperties{Subject: &s}
		return m
	}
	for _, tc := range []struct {
		m    *amqp.Message
		want string
	}{
		{amqp.NewMessage(nil), "/exchanges/events"},
		{subject(""), "/exchanges/events"},
		{subject("orders.new.eu"), "/exchanges/events/orders.new.eu"},
		{subject("a/b c#*"), "/exchanges/events/a%2Fb%20c%23%2A"},
	} {
		if got := byKey("/exchanges/events", tc.m); got != tc.want {
			t.Errorf("byKey: %q, want %q", got, tc.want)
		}
	}
}
