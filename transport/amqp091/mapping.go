package amqp091

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/Azure/go-amqp"
	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/amqpactor/amqpactor/transport"
)

// Header names for what AMQP 0-9-1 has no property for. They are the names
// RabbitMQ 4 itself uses when it converts between AMQP 1.0 and 0-9-1, so a
// message keeps them crossing between the protocols.
const (
	headerGroupID        = "x-amqp-1.0-group-id" // RabbitMQ 4's name
	headerTo             = "x-amqp-1.0-to"
	headerDeliveryCount  = "x-delivery-count" // set by quorum queues
	headerTimestampMilli = "timestamp_in_ms"  // RabbitMQ's millisecond timestamp
)

// defaultPriority is AMQP 1.0's priority of a message that sets none.
const defaultPriority = 4

// errValueBody is wrapped by the error for a message whose body is an
// amqp-value: AMQP 0-9-1 carries bytes only.
var errValueBody = errors.New("an AMQP 1.0 value body cannot be sent over AMQP 0-9-1 (use Body)")

// toPublishing maps m onto an AMQP 0-9-1 basic.publish, without an
// envelope: see the package documentation for the table.
func toPublishing(m *amqp.Message) (rmq.Publishing, error) {
	var p rmq.Publishing
	if m == nil {
		return p, errors.New("nil message")
	}
	if m.Value != nil || len(m.Sequence) > 0 {
		return p, errValueBody
	}
	switch len(m.Data) {
	case 0:
	case 1:
		p.Body = m.Data[0]
	default:
		for _, d := range m.Data {
			p.Body = append(p.Body, d...)
		}
	}
	headers := rmq.Table{}
	for k, v := range m.ApplicationProperties {
		hv, err := headerValue(v)
		if err != nil {
			return p, fmt.Errorf("header %q: %w", k, err)
		}
		headers[k] = hv
	}
	if pr := m.Properties; pr != nil {
		var err error
		if p.MessageId, err = idString("message-id", pr.MessageID); err != nil {
			return p, err
		}
		if p.CorrelationId, err = idString("correlation-id", pr.CorrelationID); err != nil {
			return p, err
		}
		p.ContentType = deref(pr.ContentType)
		p.ContentEncoding = deref(pr.ContentEncoding)
		p.ReplyTo = deref(pr.ReplyTo)
		p.Type = deref(pr.Subject)
		p.UserId = string(pr.UserID)
		if pr.CreationTime != nil && !pr.CreationTime.IsZero() {
			p.Timestamp = pr.CreationTime.UTC()
			headers[headerTimestampMilli] = pr.CreationTime.UnixMilli()
		}
		if g := deref(pr.GroupID); g != "" {
			headers[headerGroupID] = g
		}
		if to := deref(pr.To); to != "" {
			headers[headerTo] = to
		}
	}
	p.Priority = defaultPriority
	p.DeliveryMode = rmq.Transient
	if h := m.Header; h != nil {
		p.Priority = min(h.Priority, 9) // 0-9-1 priorities are 0..9
		if h.Durable {
			p.DeliveryMode = rmq.Persistent
		}
		if h.TTL > 0 {
			p.Expiration = strconv.FormatInt(h.TTL.Milliseconds(), 10)
		}
	}
	if len(headers) > 0 {
		p.Headers = headers
	}
	return p, nil
}

// fromDelivery maps a delivery back to the message the runtime reads; see
// the package documentation for the table.
func fromDelivery(d *rmq.Delivery) *amqp.Message {
	m := &amqp.Message{Data: [][]byte{d.Body}}
	props := &amqp.MessageProperties{}
	if d.MessageId != "" {
		props.MessageID = d.MessageId
	}
	if d.CorrelationId != "" {
		props.CorrelationID = d.CorrelationId
	}
	props.ContentType = ptr(d.ContentType)
	props.ContentEncoding = ptr(d.ContentEncoding)
	props.ReplyTo = ptr(d.ReplyTo)
	props.Subject = ptr(d.Type)
	if d.UserId != "" {
		props.UserID = []byte(d.UserId)
	}
	h := &amqp.MessageHeader{
		Durable:       d.DeliveryMode == rmq.Persistent,
		Priority:      d.Priority,
		FirstAcquirer: !d.Redelivered,
	}
	if h.Priority == 0 {
		// amqp091-go reads an absent priority as 0; the runtime never
		// sends 0 (it sends AMQP 1.0's default, 4, for "not set").
		h.Priority = defaultPriority
	}
	if ms, err := strconv.ParseInt(d.Expiration, 10, 64); err == nil && ms > 0 {
		h.TTL = time.Duration(ms) * time.Millisecond
	}
	if !d.Timestamp.IsZero() {
		t := d.Timestamp.UTC()
		props.CreationTime = &t
	}
	app := map[string]any{}
	for k, v := range d.Headers {
		switch k {
		case headerDeliveryCount:
			if n, ok := asUint32(v); ok {
				h.DeliveryCount = n
			}
			continue
		case headerGroupID:
			if s, ok := v.(string); ok {
				props.GroupID = &s
				continue
			}
		case headerTo:
			if s, ok := v.(string); ok {
				props.To = &s
				continue
			}
		case headerTimestampMilli:
			if n, ok := asInt64(v); ok {
				t := time.UnixMilli(n).UTC()
				props.CreationTime = &t
				continue
			}
		}
		app[k] = fromHeaderValue(v)
	}
	if len(app) > 0 {
		m.ApplicationProperties = app
	}
	m.Properties = props
	m.Header = h
	return m
}

func ptr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// idString spells a message-id or correlation-id as the shortstr AMQP
// 0-9-1 has for it: a string as it is, the other AMQP 1.0 id types in
// their usual text form (they come back as strings).
func idString(what string, id any) (string, error) {
	switch v := id.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case uint64:
		return strconv.FormatUint(v, 10), nil
	case amqp.UUID:
		return v.String(), nil
	case []byte:
		return string(v), nil
	}
	return "", fmt.Errorf("%s of type %T", what, id)
}

// headerValue converts an application-property value to a type a 0-9-1
// field table can hold.
func headerValue(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, string, []byte, float32, float64, int8, int16, int32, int64, time.Time, rmq.Decimal:
		return v, nil
	case uint8:
		return x, nil
	case int:
		return int64(x), nil
	case uint16:
		return int32(x), nil
	case uint32:
		return int64(x), nil
	case uint:
		if uint64(x) > math.MaxInt64 {
			return nil, fmt.Errorf("%d is out of range of a 0-9-1 long", x)
		}
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			return nil, fmt.Errorf("%d is out of range of a 0-9-1 long", x)
		}
		return int64(x), nil
	case amqp.Symbol:
		return string(x), nil
	case amqp.UUID:
		return x.String(), nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			n, err := headerValue(e)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out[i] = n
		}
		return out, nil
	case map[string]any:
		out := rmq.Table{}
		for k, e := range x {
			n, err := headerValue(e)
			if err != nil {
				return nil, fmt.Errorf("key %q: %w", k, err)
			}
			out[k] = n
		}
		return out, nil
	}
	return nil, fmt.Errorf("a %T cannot go in an AMQP 0-9-1 header", v)
}

// fromHeaderValue gives a nested table back as the map the runtime uses.
func fromHeaderValue(v any) any {
	switch x := v.(type) {
	case rmq.Table:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = fromHeaderValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = fromHeaderValue(e)
		}
		return out
	}
	return v
}

func asInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case int16:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint8:
		return int64(x), true
	case int:
		return int64(x), true
	}
	return 0, false
}

func asUint32(v any) (uint32, bool) {
	n, ok := asInt64(v)
	if !ok || n < 0 || n > math.MaxUint32 {
		return 0, false
	}
	return uint32(n), true
}

// poison marks a delivery over the max message size, as amqpwire does, so
// the runtime rejects it alone (transport.PoisonAnnotation).
func poison(reason string) *amqp.Message {
	return &amqp.Message{DeliveryAnnotations: amqp.Annotations{transport.PoisonAnnotation: reason}}
}
