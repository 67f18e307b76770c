package transport

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
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
	case int:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint:
		return unsigned(uint64(x))
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		return unsigned(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			n, err := argument(e)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out[i] = n
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			n, err := argument(e)
			if err != nil {
				return nil, fmt.Errorf("key %q: %w", k, err)
			}
			out[k] = n
		}
		return out, nil
	}
	return nil, fmt.Errorf("a %T cannot be encoded in AMQP", v)
}

func unsigned(x uint64) (any, error) {
	if x > math.MaxInt64 {
		return nil, fmt.Errorf("%d is out of range of a long", x)
	}
	return int64(x), nil
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
