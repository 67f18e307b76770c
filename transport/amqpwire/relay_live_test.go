package amqpwire_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// TestLiveRelay: RabbitMQ 4 offers the anonymous relay; one link to the
// anonymous terminus reaches a declared queue, declares a Queue it is sent
// to, never declares a Raw address, and answers released for a missing node
// without ending the link or the session.
func TestLiveRelay(t *testing.T) {
	conn := connect(t)
	expect(t, conn.Features().AnonymousRelay, "RabbitMQ 4 offers ANONYMOUS-RELAY")
	s := session(t, conn)
	ctx := testContext(t)

	existing := queueName(t, conn)
	declared := queueName(t, conn) // the relay declares it
	missing := queueName(t, conn)  // never declared
	_, err := conn.Management().DeclareQueue(ctx, amqpwire.QueueSpec{Name: existing, Type: amqpwire.Quorum})
	must(t, err, "declare")

	snd, err := s.NewSender(ctx, transport.SenderOptions{})
	must(t, err, "attach to the anonymous terminus")
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	r, ok := snd.(transport.Relay)
	if !ok {
		t.Fatalf("the anonymous sender %T is no Relay", snd)
	}
	expect(t, r.Address() == "", "address %q", r.Address())

	outcome := func(a address.Address, body string) messages.OutcomeKind {
		t.Helper()
		rc, err := r.SendTo(ctx, a, text(body), false)
		must(t, err, "send to "+a.String())
		o, err := rc.Wait(ctx)
		must(t, err, "outcome of "+a.String())
		return o.Kind
	}
	expect(t, outcome(address.Queue(existing), "one") == messages.Accepted, "to an existing queue")
	expect(t, outcome(address.Raw("/queues/"+missing), "lost") == messages.Released, "to a missing queue: released")
	_, err = conn.Management().QueueInfo(ctx, missing)
	expect(t, amqpwire.IsStatus(err, 404), "a Raw address is never declared: %v", err)
	expect(t, outcome(address.Queue(declared), "two") == messages.Accepted, "to a Queue the relay declares")
	expect(t, outcome(address.Queue(existing), "three") == messages.Accepted, "the link goes on")

	// Send takes properties.to as it is.
	to := "/queues/" + existing
	m := text("four")
	m.Properties = &amqp.MessageProperties{To: &to}
	rc, err := snd.Send(ctx, m, false)
	must(t, err, "send")
	o, err := rc.Wait(ctx)
	must(t, err, "outcome")
	expect(t, o.Kind == messages.Accepted, "send with properties.to: %v", o)
	_, err = snd.Send(ctx, text("nowhere"), false)
	expect(t, err != nil, "a transfer without properties.to is refused")

	for name, want := range map[string][]string{existing: {"one", "three", "four"}, declared: {"two"}} {
		rcv := newReceiver(t, s, transport.ReceiverOptions{Address: address.Queue(name), Credit: 10})
		must(t, rcv.IssueCredit(10), "credit")
		for _, body := range want {
			got := receive(t, rcv, 10*time.Second)
			expect(t, bodyOf(got) == body, "%s: got %q, want %q", name, bodyOf(got), body)
			must(t, rcv.Settle(ctx, got, messages.Outcome{Kind: messages.Accepted}), "settle")
		}
	}
}

// TestLiveNamedSenderToMissingQueue records how RabbitMQ 4 refuses a named
// sender to a queue that does not exist. Up to 4.2 it ends the whole
// session, so every other link on it ends too: this is why replies without
// the anonymous relay go on a session of their own. From 4.3 on it refuses
// the link alone and the session goes on (each expectation below says
// which release it holds for).
func TestLiveNamedSenderToMissingQueue(t *testing.T) {
	v := livetest.RabbitMQ(t, liveURL(t))
	conn := connect(t)
	ctx := testContext(t)
	s, err := conn.NewSession(ctx)
	must(t, err, "begin")
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	good := queueName(t, conn)
	bystander := newSender(t, s, address.Queue(good))
	missing := queueName(t, conn)
	_, err = s.NewSender(ctx, transport.SenderOptions{Address: address.Raw("/queues/" + missing)})
	var ae *amqp.Error
	expect(t, errors.As(err, &ae) && ae.Condition == amqp.ErrCondNotFound, "attach to a missing queue: %v", err)
	var se *amqp.SessionError
	if v.AtLeast(4, 3) {
		expect(t, !errors.As(err, &se), "RabbitMQ %v refuses the link alone: %v", v, err)
		rc, err := bystander.Send(ctx, text("x"), false)
		must(t, err, "RabbitMQ "+v.String()+": the bystander link on that session goes on")
		o, err := rc.Wait(ctx)
		must(t, err, "outcome")
		expect(t, o.Kind == messages.Accepted, "RabbitMQ %v: the bystander's send: %v", v, o)
	} else {
		// RabbitMQ 4.0.
		expect(t, errors.As(err, &se), "RabbitMQ %v ends the session on a refused attach: %v", v, err)
		_, err = bystander.Send(ctx, text("x"), false)
		expect(t, err != nil, "RabbitMQ %v: the bystander link on that session ended with it", v)
	}
	_, err = conn.Management().QueueInfo(ctx, missing)
	expect(t, amqpwire.IsStatus(err, 404), "nothing was declared: %v", err)
}
