package amqpwire

import (
	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
)

// offsetSpec is the source filter by which RabbitMQ 4 attaches a receiver
// to a stream at an offset.
const offsetSpec = "rabbitmq:stream-offset-spec"

// streamFilters are the source filters of a receiver on a stream, starting
// at o: "first", "last" and "next" as strings, an offset as a ulong, a
// time as a timestamp, as RabbitMQ reads them.
func streamFilters(o address.StreamOffset) []amqp.LinkFilter {
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
	return []amqp.LinkFilter{amqp.NewLinkFilter(offsetSpec, 0, v)}
}

// CheckStream: only RabbitMQ 4 has streams.
func (c *connector) CheckStream(a address.Address) error {
	return address.CheckStream(c.cfg.Dialect, a)
}
