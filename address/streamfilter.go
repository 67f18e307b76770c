package address

import (
	"fmt"
	"slices"
	"strings"

	"github.com/amqpactor/amqpactor/internal/sqlfilter"
)

// StreamFilter is what a subscription to a stream asks for: the messages
// that pass every part that is set. The zero value asks for every message.
type StreamFilter struct {
	// Values: the message's filter value (the annotation
	// x-stream-filter-value) is one of these. RabbitMQ filters by chunk
	// (a bloom filter) and lets others through; the runtime checks each
	// message again.
	Values []string
	// Headers: the application properties hold each of these with exactly
	// that string value.
	Headers map[string]string
	// Properties: the properties section's fields, by their AMQP names
	// (StreamFilterFields), hold each of these with exactly that string
	// value.
	Properties map[string]string
	// SQL: an SQL filter expression (RabbitMQ 4.2 and later) is TRUE of
	// the message. RabbitMQ takes either it or the property filters
	// (Headers, Properties), not both.
	SQL string
}

// IsZero reports a filter that asks for every message.
func (f StreamFilter) IsZero() bool {
	return len(f.Values) == 0 && len(f.Headers) == 0 && len(f.Properties) == 0 && f.SQL == ""
}

// MaxStreamFilterFields is how many names a StreamFilter's Headers, and its
// Properties, may hold: RabbitMQ drops a larger filter.
const MaxStreamFilterFields = 16

// StreamFilterFields are the properties-section fields a
// StreamFilter.Properties may name: those whose value is a string (or, for
// user-id, bytes compared as a string). The others (times, group-sequence)
// are for an SQL filter.
var StreamFilterFields = []string{
	"message-id", "user-id", "to", "subject", "reply-to", "correlation-id",
	"content-type", "content-encoding", "group-id", "reply-to-group-id",
}

// CheckStreamFilter reports whether f can be asked of a, with an *Error
// naming a and what is wrong: any filter on an address that is not a
// Stream, an empty value or name, an unknown field, a value beginning with
// '&' (which RabbitMQ reads as a prefix or suffix match), more names than
// MaxStreamFilterFields, an SQL
// expression that does not parse, or one together with property filters.
func CheckStreamFilter(a Address, f StreamFilter) error {
	if f.IsZero() {
		return nil
	}
	if !a.stream {
		return &Error{Address: a, Reason: "stream filters apply to a Stream address only"}
	}
	for _, v := range f.Values {
		if v == "" {
			return &Error{Address: a, Reason: "empty stream filter value"}
		}
	}
	if len(f.Headers) > MaxStreamFilterFields || len(f.Properties) > MaxStreamFilterFields {
		return &Error{Address: a, Reason: fmt.Sprintf("stream header and property filters take at most %d names each (RabbitMQ's limit)", MaxStreamFilterFields)}
	}
	for k, v := range f.Headers {
		if err := checkFilterPair(a, "header", k, v); err != nil {
			return err
		}
	}
	for k, v := range f.Properties {
		if err := checkFilterPair(a, "property", k, v); err != nil {
			return err
		}
		if !slices.Contains(StreamFilterFields, k) {
			return &Error{Address: a, Reason: fmt.Sprintf("stream property filter %q: not a field it can match; one of %s (an SQL filter reaches the others)",
				k, strings.Join(StreamFilterFields, ", "))}
		}
	}
	if f.SQL == "" {
		return nil
	}
	if len(f.Headers) > 0 || len(f.Properties) > 0 {
		return &Error{Address: a, Reason: "a stream subscription takes an SQL filter or header and property filters, not both (RabbitMQ evaluates one kind)"}
	}
	if _, err := sqlfilter.Parse(f.SQL); err != nil {
		return &Error{Address: a, Reason: "stream SQL filter: " + err.Error()}
	}
	return nil
}

func checkFilterPair(a Address, kind, k, v string) error {
	switch {
	case k == "":
		return &Error{Address: a, Reason: fmt.Sprintf("stream %s filter with an empty name", kind)}
	case strings.HasPrefix(v, "&"):
		return &Error{Address: a, Reason: fmt.Sprintf("stream %s filter %s=%q: a value may not begin with '&'", kind, k, v)}
	}
	return nil
}
