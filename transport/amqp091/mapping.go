package amqp091

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/amqpactor/amqpactor/internal/amqptypes"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/internal/values"
)

// Header names for what AMQP 0-9-1 has no property for. Their "x-" prefix
// makes RabbitMQ 4 hand them to an AMQP 1.0 reader as message annotations,
// not as application properties.
const (
	headerTo             = "x-amqp-1.0-to"
	headerGroupSequence  = "x-amqp-1.0-group-sequence"
	headerReplyToGroupID = "x-amqp-1.0-reply-to-group-id"
	headerAbsoluteExpiry = "x-amqp-1.0-absolute-expiry-time" // milliseconds
	headerCreationTime   = "x-amqp-1.0-creation-time"        // milliseconds
	headerMessageIDType  = "x-amqp-1.0-message-id-type"
	headerCorrIDType     = "x-amqp-1.0-correlation-id-type"
	headerDeliveryCount  = "x-delivery-count" // set by quorum queues
)

// The types of a message-id or correlation-id that is not a string.
const (
	idULong  = "ulong"
	idUUID   = "uuid"
	idBinary = "binary" // hex
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
	var headers rmq.Table // made on first use: most messages have none
	set := func(k string, v any) {
		if headers == nil {
			headers = rmq.Table{}
		}
		headers[k] = v
	}
	for k, v := range m.ApplicationProperties {
		hv, err := headerValue(v)
		if err != nil {
			return p, fmt.Errorf("header %q: %w", k, err)
		}
		set(k, hv)
	}
	if pr := m.Properties; pr != nil {
		var typ string
		var err error
		if p.MessageId, typ, err = idString("message-id", pr.MessageID); err != nil {
			return p, err
		}
		if typ != "" {
			set(headerMessageIDType, typ)
		}
		if p.CorrelationId, typ, err = idString("correlation-id", pr.CorrelationID); err != nil {
			return p, err
		}
		if typ != "" {
			set(headerCorrIDType, typ)
		}
		p.ContentType = deref(pr.ContentType)
		p.ContentEncoding = deref(pr.ContentEncoding)
		p.ReplyTo = deref(pr.ReplyTo)
		p.Type = deref(pr.Subject)
		p.UserId = string(pr.UserID)
		// RabbitMQ 4 converts AMQP 1.0's group-id to and from app-id.
		p.AppId = deref(pr.GroupID)
		if pr.CreationTime != nil && !pr.CreationTime.IsZero() {
			p.Timestamp = pr.CreationTime.UTC()
			set(headerCreationTime, pr.CreationTime.UnixMilli())
		}
		if pr.AbsoluteExpiryTime != nil && !pr.AbsoluteExpiryTime.IsZero() {
			set(headerAbsoluteExpiry, pr.AbsoluteExpiryTime.UnixMilli())
		}
		if to := deref(pr.To); to != "" {
			set(headerTo, to)
		}
		if g := deref(pr.ReplyToGroupID); g != "" {
			set(headerReplyToGroupID, g)
		}
		if pr.GroupSequence != nil && *pr.GroupSequence != 0 {
			set(headerGroupSequence, int64(*pr.GroupSequence))
		}
	}
	for k, v := range m.Annotations {
		key, ok := k.(string)
		if sym, isSym := k.(amqp.Symbol); isSym {
			key, ok = string(sym), true
		}
		if !ok || !strings.HasPrefix(key, "x-") {
			continue // only "x-" annotations have a 0-9-1 form (RabbitMQ's rule)
		}
		hv, err := headerValue(v)
		if err != nil {
			return p, fmt.Errorf("annotation %q: %w", key, err)
		}
		set(key, hv)
	}
	p.Priority = defaultPriority
	// Persistent unless the header says durable=false: a Message always
	// carries one, and a bare message is kept as the runtime keeps any.
	p.DeliveryMode = rmq.Persistent
	if h := m.Header; h != nil {
		if h.DeliveryCount > 0 {
			// A copy republished for a retry carries its count; a quorum
			// queue replaces it with its own when it redelivers.
			set(headerDeliveryCount, int64(h.DeliveryCount))
		}
		p.Priority = min(h.Priority, 9) // 0-9-1 priorities are 0..9
		if !h.Durable {
			p.DeliveryMode = rmq.Transient
		}
		if h.TTL > 0 {
			p.Expiration = strconv.FormatInt(h.TTL.Milliseconds(), 10)
		}
	}
	p.Headers = headers
	return p, nil
}

// fromDelivery maps a delivery back to the message the runtime reads; see
// the package documentation for the table. quorum says the delivery is from
// a quorum queue, whose x-delivery-count on a redelivery is the broker's;
// anywhere else, and on a first delivery (which RabbitMQ 4.0 hands on with
// the publisher's header), it is the publisher's, and ignored.
func fromDelivery(d *rmq.Delivery, quorum bool) *amqp.Message {
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
	if d.AppId != "" {
		props.GroupID = &d.AppId
	}
	var idType, corrType string
	var app map[string]any
	var ann amqp.Annotations
	for k, v := range d.Headers {
		switch k {
		case headerDeliveryCount:
			if n, ok := asUint32(v); ok && quorum && d.Redelivered {
				h.DeliveryCount = n
			}
			continue
		case headerTo, headerReplyToGroupID, headerMessageIDType, headerCorrIDType:
			if s, ok := v.(string); ok {
				switch k {
				case headerTo:
					props.To = &s
				case headerReplyToGroupID:
					props.ReplyToGroupID = &s
				case headerMessageIDType:
					idType = s
				default:
					corrType = s
				}
				continue
			}
		case headerGroupSequence:
			if n, ok := asUint32(v); ok {
				props.GroupSequence = &n
				continue
			}
		case headerCreationTime, headerAbsoluteExpiry:
			if n, ok := amqptypes.Int(v); ok {
				t := time.UnixMilli(n).UTC()
				if k == headerCreationTime {
					props.CreationTime = &t
				} else {
					props.AbsoluteExpiryTime = &t
				}
				continue
			}
		}
		if strings.HasPrefix(k, "x-") {
			if ann == nil {
				ann = amqp.Annotations{}
			}
			ann[k] = fromHeaderValue(v)
			continue
		}
		if app == nil {
			app = map[string]any{}
		}
		app[k] = fromHeaderValue(v)
	}
	if len(ann) > 0 {
		m.Annotations = ann
	}
	props.MessageID = typedID(props.MessageID, idType)
	props.CorrelationID = typedID(props.CorrelationID, corrType)
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
// 0-9-1 has for it: a string as it is; another AMQP 1.0 id type in text
// (decimal, canonical UUID, hex), with its type, which goes in a header so
// the id reads back as it was sent.
func idString(what string, id any) (string, string, error) {
	switch v := id.(type) {
	case nil:
		return "", "", nil
	case string:
		return v, "", nil
	case uint64:
		return strconv.FormatUint(v, 10), idULong, nil
	case amqp.UUID:
		return v.String(), idUUID, nil
	case []byte:
		return hex.EncodeToString(v), idBinary, nil
	}
	return "", "", fmt.Errorf("%s of type %T", what, id)
}

// typedID reads an id back as the type its header names; an id without
// one, or that does not parse as it, stays a string.
func typedID(id any, typ string) any {
	s, ok := id.(string)
	if !ok || typ == "" {
		return id
	}
	switch typ {
	case idULong:
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			return n
		}
	case idUUID:
		if u, err := parseUUID(s); err == nil {
			return u
		}
	case idBinary:
		if b, err := hex.DecodeString(s); err == nil {
			return b
		}
	}
	return id
}

func parseUUID(s string) (amqp.UUID, error) {
	var u amqp.UUID
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != len(u) {
		return u, fmt.Errorf("not a UUID: %q", s)
	}
	copy(u[:], b)
	return u, nil
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
	case uint16, uint32:
		return x, nil
	case uint, uint64:
		if n, ok := amqptypes.Int(x); ok {
			return n, nil
		}
		return nil, fmt.Errorf("%d is out of range of a 0-9-1 long", x)
	case amqp.Symbol:
		return string(x), nil
	case amqp.UUID:
		return x.String(), nil
	case []any:
		return values.List(x, headerValue)
	case map[string]any:
		return values.Map(rmq.Table{}, x, "key", headerValue)
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

func asUint32(v any) (uint32, bool) {
	n, ok := amqptypes.Int(v)
	if !ok || n < 0 || n > math.MaxUint32 {
		return 0, false
	}
	return uint32(n), true
}

// poisonMark reports whether a delivery's headers carry
// transport.PoisonAnnotation: set by the inbound guard (guard.go) in place
// of a table amqp091-go would not read, or by a publisher, which the
// runtime treats the same way.
func poisonMark(h rmq.Table) (string, bool) {
	v, ok := h[transport.PoisonAnnotation]
	if !ok {
		return "", false
	}
	if s, isString := v.(string); isString && s != "" {
		return s[:min(len(s), maxPoisonReason)], true
	}
	return fmt.Sprintf("the header %s holds a %T", transport.PoisonAnnotation, v), true
}

// poison marks a delivery over the max message size, as amqpwire does, so
// the runtime rejects it alone (transport.PoisonAnnotation).
func poison(reason string) *amqp.Message {
	return &amqp.Message{DeliveryAnnotations: amqp.Annotations{transport.PoisonAnnotation: reason}}
}

// CheckMessage reports what of m AMQP 0-9-1 cannot carry, without mapping
// it: App.Publish asks before a message reaches a sender.
func (c *connector) CheckMessage(m *amqp.Message) error {
	if m == nil {
		return errors.New("nil message")
	}
	if m.Value != nil || len(m.Sequence) > 0 {
		return errValueBody
	}
	for k, v := range m.ApplicationProperties {
		if _, err := headerValue(v); err != nil {
			return fmt.Errorf("header %q: %w", k, err)
		}
	}
	for k, v := range m.Annotations {
		if _, err := headerValue(v); err != nil {
			return fmt.Errorf("annotation %v: %w", k, err)
		}
	}
	if p := m.Properties; p != nil {
		if _, _, err := idString("message-id", p.MessageID); err != nil {
			return err
		}
		if _, _, err := idString("correlation-id", p.CorrelationID); err != nil {
			return err
		}
	}
	return nil
}
