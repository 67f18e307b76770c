package transport_test

import (
	"strings"
	"testing"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport"
)

// A quorum queue with a dead-letter queue is declared with the arguments
// that make RabbitMQ 4 move what it rejects there at least once; without
// one, or on a classic queue, nothing but what the user asked for.
func TestQueueArgumentsDeadLetter(t *testing.T) {
	o := transport.ReceiverOptions{Address: address.Queue("orders"), DeadLetter: address.Queue("orders.dl"), DeliveryLimit: 3}
	args, err := transport.ReceiveQueueArguments(o, true)
	noErr(t, err, "ReceiveQueueArguments")
	want := map[string]any{
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": "orders.dl",
		"x-dead-letter-strategy":    "at-least-once",
		"x-overflow":                "reject-publish",
		"x-delivery-limit":          int64(3),
	}
	check(t, len(args) == len(want), "arguments: %v", args)
	for k, v := range want {
		check(t, args[k] == v, "%s = %#v, want %#v", k, args[k], v)
	}
	check(t, transport.DeadLetterQueue(o, true) == "orders.dl", "dead-letter queue of a quorum queue")

	o.DeliveryLimit = 0
	args, err = transport.ReceiveQueueArguments(o, true)
	noErr(t, err, "ReceiveQueueArguments without a limit")
	_, limited := args["x-delivery-limit"]
	check(t, !limited, "no x-delivery-limit without one: %v", args)

	args, err = transport.ReceiveQueueArguments(o, false)
	noErr(t, err, "ReceiveQueueArguments of a classic queue")
	check(t, args == nil, "a classic queue dead-letters nothing by its arguments: %v", args)

	o.DeadLetter = address.Topic("dead")
	args, err = transport.ReceiveQueueArguments(o, true)
	noErr(t, err, "ReceiveQueueArguments with a topic")
	check(t, args == nil, "a topic is not a dead-letter queue: %v", args)

	args, err = transport.ReceiveQueueArguments(transport.ReceiverOptions{Address: address.Queue("plain")}, true)
	noErr(t, err, "ReceiveQueueArguments of a plain queue")
	check(t, args == nil, "a plain queue is declared as before: %v", args)
}

// The user's arguments are added to ours (integers as long); one of ours
// given another value is an error naming the key, the same value is not;
// a value AMQP cannot encode is an error naming its key.
func TestQueueArgumentsMerge(t *testing.T) {
	o := transport.ReceiverOptions{Address: address.Queue("orders"), DeadLetter: address.Queue("orders.dl"),
		QueueArguments: map[string]any{"x-max-length": 10, "x-overflow": "reject-publish", "x-queue-type": "quorum"}}
	args, err := transport.ReceiveQueueArguments(o, true)
	noErr(t, err, "ReceiveQueueArguments")
	check(t, args["x-max-length"] == int64(10), "x-max-length as a long: %#v", args["x-max-length"])
	_, typ := args["x-queue-type"]
	check(t, !typ, "x-queue-type is the transport's to set from the queue's type")

	o.QueueArguments = map[string]any{"x-overflow": "drop-head"}
	_, err = transport.ReceiveQueueArguments(o, true)
	check(t, err != nil && strings.Contains(err.Error(), `"x-overflow"`), "conflict names the key: %v", err)

	o.QueueArguments = map[string]any{"x-queue-type": "classic"}
	_, err = transport.ReceiveQueueArguments(o, true)
	check(t, err != nil && strings.Contains(err.Error(), `"x-queue-type"`), "conflict on the type names the key: %v", err)

	o.QueueArguments = map[string]any{"x-bad": struct{}{}}
	_, err = transport.ReceiveQueueArguments(o, true)
	check(t, err != nil && strings.Contains(err.Error(), `"x-bad"`), "unencodable value names the key: %v", err)
}

func noErr(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func check(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Fatalf(format, args...)
	}
}
