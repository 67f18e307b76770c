package amqpwire

import (
	"fmt"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport"
)

// The source filters by which RabbitMQ 4 attaches a receiver to a stream
// at an offset, and asks for the messages with some filter values only.
const (
	offsetSpec      = "rabbitmq:stream-offset-spec"
	filterValues    = "rabbitmq:stream-filter"
	matchUnfiltered = "rabbitmq:stream-match-unfiltered"
	// appProperties and properties are the AMQP filter expressions on
	// the application properties and the properties section (RabbitMQ
	// 4.1 and later).
	appProperties = "amqp:application-properties-filter"
	properties    = "amqp:properties-filter"
	// sqlFilter is the name RabbitMQ (4.2 and later) reads an SQL filter
	// expression under; sqlFilterCode is its descriptor, amqp:sql-filter.
	sqlFilter     = "sql-filter"
	sqlFilterCode = 0x120
)

// streamFilters are the source filters of a receiver on a stream, starting
// at o: "first", "last" and "next" as strings, an offset as a ulong, a
// time as a timestamp, as RabbitMQ reads them; then what f asks for, the
// filter values with no message lacking one.
func streamFilters(o address.StreamOffset, f address.StreamFilter) []amqp.LinkFilter {
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
	if len(f.Values) > 0 {
		list := make([]any, len(f.Values))
		for i, s := range f.Values {
			list[i] = s
		}
		fs = append(fs, amqp.NewLinkFilter(filterValues, 0, list), amqp.NewLinkFilter(matchUnfiltered, 0, false))
	}
	if len(f.Headers) > 0 {
		m := make(map[string]any, len(f.Headers))
		for k, v := range f.Headers {
			m[k] = v
		}
		fs = append(fs, amqp.NewLinkFilter(appProperties, 0, m))
	}
	if len(f.Properties) > 0 {
		// Keys are symbols; each field's value has the type the
		// properties section gives it, or RabbitMQ drops the filter.
		m := make(map[amqp.Symbol]any, len(f.Properties))
		for k, v := range f.Properties {
			switch k {
			case "user-id":
				m[amqp.Symbol(k)] = []byte(v)
			case "content-type", "content-encoding":
				m[amqp.Symbol(k)] = amqp.Symbol(v)
			default:
				m[amqp.Symbol(k)] = v
			}
		}
		fs = append(fs, amqp.NewLinkFilter(properties, 0, m))
	}
	if f.SQL != "" {
		fs = append(fs, amqp.NewLinkFilter(sqlFilter, sqlFilterCode, f.SQL))
	}
	return fs
}

// CheckStream: only RabbitMQ 4 has streams.
func (c *connector) CheckStream(a address.Address) error {
	return address.CheckStream(c.cfg.Dialect, a)
}

// checkStreamSQL refuses an SQL filter on a broker before RabbitMQ 4.2,
// which would attach without it and deliver every message.
func (c *Conn) checkStreamSQL(o transport.ReceiverOptions) error {
	if o.StreamFilter.SQL == "" || c.amqp == nil {
		return nil
	}
	major, minor, ok := rabbitRelease(c.amqp.Properties())
	if ok && (major > 4 || major == 4 && minor >= 2) {
		return nil
	}
	v, _ := c.amqp.Properties()["version"].(string)
	return &transport.LinkError{Address: o.Address.String(), Op: "attach",
		Err: fmt.Errorf("%w: SQL stream filters need RabbitMQ 4.2 or later; the broker is %q", transport.ErrNotSupported, v)}
}

// sqlRefused reports the error for a receiver whose SQL filter the broker
// left out of its attach: it could not parse or evaluate the expression.
func sqlRefused(o transport.ReceiverOptions, r *amqp.Receiver) error {
	if o.StreamFilter.SQL == "" || r.LinkSourceFilterValue(sqlFilter) != nil {
		return nil
	}
	return &transport.LinkError{Address: o.Address.String(), Op: "attach",
		Err: fmt.Errorf("%w: the broker refused the SQL stream filter %q", transport.ErrNotSupported, o.StreamFilter.SQL)}
}
