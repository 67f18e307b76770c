package amqpwire

import (
	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
)

// The source filters by which RabbitMQ 4 attaches a receiver to a stream
// at an offset, and asks for the messages with some filter values only.
const (
	offsetSpec      = "rabbitmq:stream-offset-spec"
	filterValues    = "rabbitmq:stream-filter"
	matchUnfiltered = "rabbitmq:stream-match-unfiltered"
	// appProperties is the AMQP filter expression on application
	// properties (RabbitMQ 4.1 and later).
	appProperties = "amqp:application-properties-filter"
)

// streamFilters are the source filters of a receiver on a stream, starting
// at o: "first", "last" and "next" as strings, an offset as a ulong, a
// time as a timestamp, as RabbitMQ reads them; with values, the list of
// filter values, and no message without one; with props, the application
// properties filter.
func streamFilters(o address.StreamOffset, values []string, props map[string]string) []amqp.LinkFilter {
	var v any
	switch o.Kind() {
	case address.OffsetFirst:
		v = "first"
	case address.OffsetLast:
		v = "last"
	case address.OffsetAt:
		v = uint64(o.Offset())
	case address.OffsetSince:
		v = o.Time()
	default:
		v = "next"
	}
	fs := []amqp.LinkFilter{amqp.NewLinkFilter(offsetSpec, 0, v)}
	if len(values) > 0 {
		list := make([]any, len(values))
		for i, s := range values {
			list[i] = s
		}
		fs = append(fs, amqp.NewLinkFilter(filterValues, 0, list), amqp.NewLinkFilter(matchUnfiltered, 0, false))
	}
	if len(props) > 0 {
		m := make(map[string]any, len(props))
		for k, v := range props {
			m[k] = v
		}
		fs = append(fs, amqp.NewLinkFilter(appProperties, 0, m))
	}
	return fs
}

// CheckStream: only RabbitMQ 4 has streams.
func (c *connector) CheckStream(a address.Address) error {
	return address.CheckStream(c.cfg.Dialect, a)
}
