package transport

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/amqptypes"
	"github.com/amqpactor/amqpactor/transport/internal/values"
)

// QueueArguments checks that every value of args can go on the wire (AMQP
// primitive types, and lists and maps of them) and returns a copy with every
// integer as int64, the type brokers read x-arguments as, so that one value
// compares equal however it was spelt. The error names the key.
func QueueArguments(args map[string]any) (map[string]any, error) {
	if args == nil {
		return nil, nil
	}
	out := make(map[string]any, len(args))
	for k, v := range args {
		if k == "" {
			return nil, fmt.Errorf("queue argument with an empty name")
		}
		n, err := argument(v)
		if err != nil {
			return nil, fmt.Errorf("queue argument %q: %w", k, err)
		}
		out[k] = n
	}
	return out, nil
}

func argument(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, string, amqp.Symbol, float32, float64, []byte, time.Time, amqp.UUID:
		return v, nil
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		if n, ok := amqptypes.Int(x); ok {
			return n, nil
		}
		return nil, fmt.Errorf("%d is out of range of a long", x)
	case []any:
		return values.List(x, argument)
	case map[string]any:
		return values.Map(make(map[string]any, len(x)), x, "key", argument)
	}
	return nil, fmt.Errorf("a %T cannot be encoded in AMQP", v)
}

// DeadLetterQueue is the queue a receiver's queue dead-letters to, on
// RabbitMQ 4 over either protocol: only a quorum queue does it at least once
// (x-dead-letter-strategy), so on a classic one, or without a queue to
// dead-letter to, it is empty and the runtime publishes dead letters itself.
func DeadLetterQueue(o ReceiverOptions, quorum bool) string {
	if !quorum || o.DeadLetter.Kind() != address.KindQueue {
		return ""
	}
	return o.DeadLetter.Name()
}

// ReceiveQueueArguments are the x-arguments of the queue of a receiver on
// RabbitMQ 4, over either protocol: the ones the runtime sets itself (the
// dead-lettering of DeadLetterQueue), merged with o.QueueArguments, where one
// of ours given another value is an error naming the key. x-queue-type is
// checked against the queue's type but left out: each transport declares the
// type its own way. Nil when there are none, so the queue is declared as it
// always was.
func ReceiveQueueArguments(o ReceiverOptions, quorum bool) (map[string]any, error) {
	ours := map[string]any{"x-queue-type": "classic"}
	if quorum {
		ours["x-queue-type"] = "quorum"
	}
	if dl := DeadLetterQueue(o, quorum); dl != "" {
		// Through the default exchange, straight to the dead-letter queue;
		// at-least-once needs reject-publish, or the broker would refuse it.
		ours["x-dead-letter-exchange"] = ""
		ours["x-dead-letter-routing-key"] = dl
		ours["x-dead-letter-strategy"] = "at-least-once"
		ours["x-overflow"] = "reject-publish"
		if o.DeliveryLimit > 0 {
			ours["x-delivery-limit"] = int64(o.DeliveryLimit)
		}
	}
	theirs, err := QueueArguments(o.QueueArguments)
	if err != nil {
		return nil, err
	}
	args, err := MergeQueueArguments(ours, theirs)
	if err != nil {
		return nil, err
	}
	delete(args, "x-queue-type")
	if len(args) == 0 {
		return nil, nil
	}
	return args, nil
}

// MergeQueueArguments returns ours with theirs added: a key of ours that
// theirs gives another value is an error naming it, since either way one
// side would declare a queue it did not ask for.
func MergeQueueArguments(ours, theirs map[string]any) (map[string]any, error) {
	out := make(map[string]any, len(ours)+len(theirs))
	for k, v := range ours {
		out[k] = v
	}
	var clash []string
	for k, v := range theirs {
		if o, ok := ours[k]; ok && !reflect.DeepEqual(o, v) {
			clash = append(clash, fmt.Sprintf("%q (%v, amqpactor declares %v)", k, v, o))
			continue
		}
		out[k] = v
	}
	if len(clash) > 0 {
		sort.Strings(clash)
		return nil, fmt.Errorf("queue arguments conflict with amqpactor's own: %s", strings.Join(clash, ", "))
	}
	return out, nil
}
