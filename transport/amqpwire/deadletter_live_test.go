package amqpwire_test

import (
	"testing"
	"time"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// A receiver with a dead-letter queue declares it and its own quorum queue
// with the dead-letter arguments, so a message it rejects is moved there by
// RabbitMQ 4 (at least once), not dropped. A later receiver that asks for
// other arguments is answered 409 and attaches to the queue as it is.
func TestLiveDeadLetterDeclared(t *testing.T) {
	conn := connect(t)
	ctx := testContext(t)
	name, dl := queueName(t, conn), queueName(t, conn)
	s := session(t, conn)
	rcv := newReceiver(t, s, transport.ReceiverOptions{Address: address.Queue(name), Credit: 10,
		DeadLetter: address.Queue(dl), DeliveryLimit: 3, QueueArguments: map[string]any{"x-max-length": 100}})
	info, err := conn.Management().QueueInfo(ctx, name)
	must(t, err, "queue info")
	for k, want := range map[string]any{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dl, "x-dead-letter-strategy": "at-least-once",
		"x-overflow": "reject-publish", "x-delivery-limit": int64(3), "x-max-length": int64(100),
	} {
		expect(t, info.Arguments[k] == want, "%s = %#v, want %#v (all: %v)", k, info.Arguments[k], want, info.Arguments)
	}
	snd := newSender(t, s, address.Queue(name))
	_, err = snd.Send(ctx, text("doomed"), false)
	must(t, err, "send")
	must(t, rcv.IssueCredit(10), "credit")
	m := receive(t, rcv, 10*time.Second)
	must(t, rcv.Settle(ctx, m, messages.Outcome{Kind: messages.Rejected, Condition: "test:rejected"}), "reject")

	drcv := newReceiver(t, s, transport.ReceiverOptions{Address: address.Queue(dl), Credit: 10})
	must(t, drcv.IssueCredit(10), "credit")
	got := receive(t, drcv, 10*time.Second)
	expect(t, bodyOf(got) == "doomed", "dead letter's body: %q", bodyOf(got))
	must(t, drcv.Settle(ctx, got, messages.Outcome{Kind: messages.Accepted}), "accept the dead letter")

	// The queue exists with other arguments: 409, used as it is.
	_ = newReceiver(t, session(t, conn), transport.ReceiverOptions{Address: address.Queue(name), Credit: 1})
}
