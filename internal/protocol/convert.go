package protocol

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"time"
	"unicode/utf8"

	amqp "github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/messages"
)

// Field mapping between Message and the AMQP 1.0 sections (no envelope of
// our own, so the message reads as a plain AMQP message in any client):
//
//	Body                     one data section (am.Data = [][]byte{Body}); an empty
//	                         or nil Body is one empty data section, unless Value is set
//	Value                    amqp-value section when Body is nil (Body wins when both
//	                         are set); FromAMQP also turns amqp-sequence sections
//	                         into a []any Value
//	MessageID, CorrelationID properties; string, uint64, amqp.UUID or []byte
//	ContentType, ...         properties; "" means absent
//	UserID                   properties; empty means absent
//	CreationTime, ...Expiry  properties; the zero time means absent; milliseconds
//	GroupSequence            properties; 0 means absent
//	Headers                  application-properties; AMQP primitives only
//	Durable, TTL, ...        header section, created only when a field is not
//	                         the AMQP default
//	Priority                 header section, see below
//	Annotations              message-annotations; keys are symbols on the wire
//	DeliveryAnnotations      delivery-annotations, like Annotations
//	Footer                   footer, like Annotations
//
// Priority: AMQP's default priority is 4 and a uint8 cannot say "unset", so on
// the way out Priority 0 means "not set": no priority goes on the wire and
// receivers see the default 4. 1 to 255 are sent as they are (4 is the
// default, so it costs no bytes). On the way in FromAMQP reports the priority
// in effect: the header's value, or 4 when the header or the field is absent.
// Every priority a user sets (1 to 255) therefore round-trips exactly and an
// unset one (0) reads back as 4. The cost: AMQP's lowest priority 0 cannot be
// sent, and a received 0 is re-sent as the default.
//
// Round trip through the wire (ToAMQP, encode, decode, FromAMQP) is exact for
// every field except these normalisations:
//   - CreationTime and AbsoluteExpiryTime are truncated to the millisecond and
//     come back in UTC;
//   - TTL is rounded up to a whole millisecond (so a positive TTL never
//     becomes "no expiry");
//   - Priority 0 reads back as 4 (above);
//   - a nil Body reads back as an empty non-nil one; an empty UserID and empty
//     maps read back as nil; a []byte(nil) message-id reads back as []byte{};
//   - header and annotation values come back as go-amqp decodes them: int as
//     int64, uint as uint64, amqp.Symbol as string, amqp.Null as nil,
//     time.Time truncated to the millisecond in the local time zone;
//   - annotation keys other than symbols (ulong keys from other clients) come
//     back as decimal strings, and are sent again as symbols.
//
// Neither function copies payloads: the result of ToAMQP points into m (Body,
// UserID, Headers and the string fields) and the result of FromAMQP shares
// Body and Headers with am. Neither side may be changed while the other is in
// use.

// convMaxTTL is the largest TTL the header's uint milliseconds can carry.
const convMaxTTL = time.Duration(math.MaxUint32) * time.Millisecond

// convMaxDepth bounds the nesting of lists and maps inside annotations and
// amqp-value bodies (and stops a self-referencing []any).
const convMaxDepth = 64

// The range of an AMQP timestamp: a signed 64-bit count of milliseconds
// (a time is truncated to its millisecond, so the last one is whole).
var (
	convMinTime = time.UnixMilli(math.MinInt64)
	convMaxTime = time.UnixMilli(math.MaxInt64).Add(time.Millisecond - 1)
)

// convBundle lets ToAMQP allocate a message with its header and data slice
// at once; convFull adds the properties, which a message without any does
// not pay for (they are most of the size).
type convBundle struct {
	msg  amqp.Message
	hdr  amqp.MessageHeader
	data [1][]byte
}

type convFull struct {
	convBundle
	props amqp.MessageProperties
}

// ToAMQP maps m onto the sections of an AMQP message. It returns an error,
// naming the field or key, when a value cannot go on the wire: an id or a
// header of a type AMQP does not allow, a string that is not UTF-8, a time
// or a TTL out of range. The result shares memory with m (see above).
func ToAMQP(m *messages.Message) (*amqp.Message, error) {
	if m == nil {
		return nil, errors.New("messages: ToAMQP of a nil message")
	}
	if convHasProperties(m) {
		f := &convFull{}
		return toAMQP(m, &f.convBundle, &f.props)
	}
	return toAMQP(m, &convBundle{}, nil)
}

// Outgoing is the memory of one mapped message, for a caller that knows when
// the transport is done with it and can map the next message into the same
// memory (App.Publish keeps them in a sync.Pool: at a few hundred thousand
// messages a second the garbage collector is the largest cost). The zero
// value is ready to use.
type Outgoing struct {
	f convFull
}

// Map is ToAMQP into o's memory. The result is valid until the next Map or
// Reset of o.
func (o *Outgoing) Map(m *messages.Message) (*amqp.Message, error) {
	if m == nil {
		return nil, errors.New("messages: ToAMQP of a nil message")
	}
	o.Reset()
	var props *amqp.MessageProperties
	if convHasProperties(m) {
		props = &o.f.props
	}
	return toAMQP(m, &o.f.convBundle, props)
}

// Reset drops every reference o holds into the last mapped message.
func (o *Outgoing) Reset() { o.f = convFull{} }

// toAMQP fills b (and props, when m has properties) with m's sections.
func toAMQP(m *messages.Message, b *convBundle, props *amqp.MessageProperties) (*amqp.Message, error) {
	am := &b.msg

	// Body.
	if m.Body == nil && m.Value != nil {
		if reason, bad := convCheck(m.Value, true, 0); reason != "" {
			return nil, fmt.Errorf("messages: Value: %s %T", reason, bad)
		}
		am.Value = m.Value
	} else {
		b.data[0] = m.Body
		am.Data = b.data[:]
	}

	// Properties.
	if props != nil {
		if err := convProperties(m, props); err != nil {
			return nil, err
		}
		am.Properties = props
	}

	// Application properties.
	if len(m.Headers) > 0 {
		for k, v := range m.Headers {
			if !utf8.ValidString(k) {
				return nil, fmt.Errorf("messages: header %q: key is not valid UTF-8", k)
			}
			if reason, bad := convCheck(v, false, 0); reason != "" {
				return nil, fmt.Errorf("messages: header %q: %s %T", k, reason, bad)
			}
		}
		am.ApplicationProperties = m.Headers
	}

	// Header.
	if m.TTL < 0 || m.TTL > convMaxTTL {
		return nil, fmt.Errorf("messages: TTL %v out of range (0 to %v)", m.TTL, convMaxTTL)
	}
	if m.Durable || m.FirstAcquirer || m.TTL != 0 || m.DeliveryCount != 0 || (m.Priority != 0 && m.Priority != 4) {
		h := &b.hdr
		h.Durable = m.Durable
		h.Priority = m.Priority
		if h.Priority == 0 {
			h.Priority = 4 // not set: go-amqp leaves the default off the wire
		}
		h.TTL = (m.TTL + time.Millisecond - 1) / time.Millisecond * time.Millisecond
		h.FirstAcquirer = m.FirstAcquirer
		h.DeliveryCount = m.DeliveryCount
		am.Header = h
	}

	// Annotations.
	var err error
	if am.Annotations, err = convAnnotationsOut("annotation", m.Annotations); err != nil {
		return nil, err
	}
	if am.DeliveryAnnotations, err = convAnnotationsOut("delivery annotation", m.DeliveryAnnotations); err != nil {
		return nil, err
	}
	if am.Footer, err = convAnnotationsOut("footer", m.Footer); err != nil {
		return nil, err
	}
	return am, nil
}

func convHasProperties(m *messages.Message) bool {
	return m.MessageID != nil || m.CorrelationID != nil ||
		m.ContentType != "" || m.ContentEncoding != "" || m.ReplyTo != "" ||
		m.Subject != "" || m.To != "" || m.GroupID != "" || m.ReplyToGroupID != "" ||
		len(m.UserID) > 0 || !m.CreationTime.IsZero() || !m.AbsoluteExpiryTime.IsZero() ||
		m.GroupSequence != 0
}

// convProperties validates m's properties and fills p with pointers into m.
func convProperties(m *messages.Message, p *amqp.MessageProperties) error {
	var err error
	if p.MessageID, err = convID("MessageID", m.MessageID); err != nil {
		return err
	}
	if p.CorrelationID, err = convID("CorrelationID", m.CorrelationID); err != nil {
		return err
	}
	// content-type and content-encoding are symbols: go-amqp converts them.
	p.ContentType = convSym(&m.ContentType)
	p.ContentEncoding = convSym(&m.ContentEncoding)
	if p.ReplyTo, err = convStr("ReplyTo", &m.ReplyTo); err != nil {
		return err
	}
	if p.Subject, err = convStr("Subject", &m.Subject); err != nil {
		return err
	}
	if p.To, err = convStr("To", &m.To); err != nil {
		return err
	}
	if p.GroupID, err = convStr("GroupID", &m.GroupID); err != nil {
		return err
	}
	if p.ReplyToGroupID, err = convStr("ReplyToGroupID", &m.ReplyToGroupID); err != nil {
		return err
	}
	if len(m.UserID) > 0 {
		p.UserID = m.UserID
	}
	if p.CreationTime, err = convTime("CreationTime", &m.CreationTime); err != nil {
		return err
	}
	if p.AbsoluteExpiryTime, err = convTime("AbsoluteExpiryTime", &m.AbsoluteExpiryTime); err != nil {
		return err
	}
	if m.GroupSequence != 0 {
		p.GroupSequence = &m.GroupSequence
	}
	return nil
}

// convID validates a message-id or correlation-id.
func convID(field string, id any) (any, error) {
	switch v := id.(type) {
	case nil, uint64, amqp.UUID, []byte:
		return id, nil
	case string:
		if !utf8.ValidString(v) {
			return nil, fmt.Errorf("messages: %s: string is not valid UTF-8", field)
		}
		return id, nil
	}
	return nil, fmt.Errorf("messages: %s: unsupported type %T (want string, uint64, amqp.UUID or []byte)", field, id)
}

func convSym(s *string) *string {
	if *s == "" {
		return nil
	}
	return s
}

func convStr(field string, s *string) (*string, error) {
	if *s == "" {
		return nil, nil
	}
	if !utf8.ValidString(*s) {
		return nil, fmt.Errorf("messages: %s: string is not valid UTF-8", field)
	}
	return s, nil
}

func convTime(field string, t *time.Time) (*time.Time, error) {
	if t.IsZero() {
		return nil, nil
	}
	if !convTimeInRange(*t) {
		return nil, fmt.Errorf("messages: %s: %v is outside the AMQP timestamp range", field, *t)
	}
	return t, nil
}

func convTimeInRange(t time.Time) bool {
	return !t.Before(convMinTime) && !t.After(convMaxTime)
}

// convAnnotationsOut validates an annotations map and converts it to go-amqp's
// map[any]any, whose string keys go on the wire as symbols.
func convAnnotationsOut(what string, in map[string]any) (amqp.Annotations, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(amqp.Annotations, len(in))
	for k, v := range in {
		if reason, bad := convCheck(v, true, 0); reason != "" {
			return nil, fmt.Errorf("messages: %s %q: %s %T", what, k, reason, bad)
		}
		out[k] = v
	}
	return out, nil
}

// convCheck reports whether go-amqp can encode v. Outside compound contexts
// (application-properties) only AMQP primitives pass; in compound contexts
// (annotations, footer, amqp-value bodies) lists, maps and arrays pass too,
// checked element by element. It returns why v (or the element bad inside
// it) cannot be sent, or "" when it can.
func convCheck(v any, compound bool, depth int) (reason string, bad any) {
	switch t := v.(type) {
	case nil, bool,
		int, int8, int16, int32, int64,
		uint, uint8, uint16, uint32, uint64,
		float32, float64,
		[]byte, amqp.Symbol, amqp.UUID, amqp.Null:
		return "", nil
	case string:
		if !utf8.ValidString(t) {
			return "invalid UTF-8 in", v
		}
		return "", nil
	case time.Time:
		if !convTimeInRange(t) {
			return "timestamp out of range in", v
		}
		return "", nil
	}
	if !compound {
		switch v.(type) {
		case []any, map[string]any, map[any]any, map[amqp.Symbol]any, amqp.Annotations,
			[]int8, []uint16, []int16, []uint32, []int32, []uint64, []int64,
			[]float32, []float64, []bool, []string, []amqp.Symbol, [][]byte,
			[]time.Time, []amqp.UUID, []map[any]any:
			return "maps, lists and arrays are not allowed in application-properties, got", v
		}
		return convCheckOther(v)
	}
	if depth >= convMaxDepth {
		return "nesting too deep at", v
	}
	depth++
	switch t := v.(type) {
	case []any:
		for _, e := range t {
			if reason, bad := convCheck(e, true, depth); reason != "" {
				return reason, bad
			}
		}
		return "", nil
	case map[string]any:
		for k, e := range t {
			if !utf8.ValidString(k) {
				return "invalid UTF-8 in", k
			}
			if reason, bad := convCheck(e, true, depth); reason != "" {
				return reason, bad
			}
		}
		return "", nil
	case map[any]any:
		return convCheckMap(t, depth)
	case []map[any]any:
		for _, mm := range t {
			if reason, bad := convCheckMap(mm, depth); reason != "" {
				return reason, bad
			}
		}
		return "", nil
	case map[amqp.Symbol]any:
		for _, e := range t {
			if reason, bad := convCheck(e, true, depth); reason != "" {
				return reason, bad
			}
		}
		return "", nil
	case amqp.Annotations:
		for k, e := range t {
			switch k.(type) {
			case string, amqp.Symbol, int64, int:
			default:
				return "unsupported annotations key type", k
			}
			if reason, bad := convCheck(e, true, depth); reason != "" {
				return reason, bad
			}
		}
		return "", nil
	case []string:
		for _, s := range t {
			if !utf8.ValidString(s) {
				return "invalid UTF-8 in", s
			}
		}
		return "", nil
	case []time.Time:
		for _, e := range t {
			if !convTimeInRange(e) {
				return "timestamp out of range in", e
			}
		}
		return "", nil
	case []int8, []uint16, []int16, []uint32, []int32, []uint64, []int64,
		[]float32, []float64, []bool, []amqp.Symbol, [][]byte, []amqp.UUID:
		return "", nil
	}
	return convCheckOther(v)
}

func convCheckMap(m map[any]any, depth int) (string, any) {
	for k, e := range m {
		if reason, bad := convCheck(k, true, depth); reason != "" {
			return reason, bad
		}
		if reason, bad := convCheck(e, true, depth); reason != "" {
			return reason, bad
		}
	}
	return "", nil
}

// convCheckOther accepts values of go-amqp's own encodable types that the
// switches above cannot name, such as a described value decoded from
// another client's message, so that what FromAMQP received can be sent on.
// Only go-amqp's types can implement its marshaler (the buffer type is
// internal to go-amqp), so user types still fail here. This is the cold
// path: the reflection only rules out nil pointers, which go-amqp would
// dereference.
func convCheckOther(v any) (string, any) {
	if convIsAMQPMarshaler(v) {
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
			return "nil", v
		}
		return "", nil
	}
	return "unsupported type", v
}

// convMarshaler is go-amqp's internal marshaler interface, instantiated with
// its internal buffer type by inference from one of its exported methods.
type convMarshaler[B any] interface{ Marshal(*B) error }

func convMarshalerCheck[B any](func(*B) error) func(any) bool {
	return func(v any) bool {
		_, ok := v.(convMarshaler[B])
		return ok
	}
}

var convIsAMQPMarshaler = convMarshalerCheck(amqp.Null{}.Marshal)

// FromAMQP maps a received AMQP message onto a Message. It never fails and
// never panics: absent sections leave their fields empty, values of
// unexpected types are passed through as go-amqp decoded them, and a nil am
// gives nil. The result shares Body and Headers with am (see above).
func FromAMQP(am *amqp.Message) *messages.Message {
	if am == nil {
		return nil
	}
	m := &messages.Message{Priority: 4}

	// Body.
	switch len(am.Data) {
	case 0:
	case 1:
		m.Body = am.Data[0]
	default:
		n := 0
		for _, d := range am.Data {
			n += len(d)
		}
		body := make([]byte, 0, n)
		for _, d := range am.Data {
			body = append(body, d...)
		}
		m.Body = body
	}
	m.Value = am.Value
	if m.Value == nil && len(am.Sequence) > 0 {
		if len(am.Sequence) == 1 {
			m.Value = am.Sequence[0]
		} else {
			n := 0
			for _, s := range am.Sequence {
				n += len(s)
			}
			seq := make([]any, 0, n)
			for _, s := range am.Sequence {
				seq = append(seq, s...)
			}
			m.Value = seq
		}
	}

	// Properties.
	if p := am.Properties; p != nil {
		m.MessageID = p.MessageID
		m.CorrelationID = p.CorrelationID
		m.ContentType = convDeref(p.ContentType)
		m.ContentEncoding = convDeref(p.ContentEncoding)
		m.ReplyTo = convDeref(p.ReplyTo)
		m.Subject = convDeref(p.Subject)
		m.To = convDeref(p.To)
		m.GroupID = convDeref(p.GroupID)
		m.ReplyToGroupID = convDeref(p.ReplyToGroupID)
		if len(p.UserID) > 0 {
			m.UserID = p.UserID
		}
		if p.CreationTime != nil {
			m.CreationTime = p.CreationTime.UTC()
		}
		if p.AbsoluteExpiryTime != nil {
			m.AbsoluteExpiryTime = p.AbsoluteExpiryTime.UTC()
		}
		if p.GroupSequence != nil {
			m.GroupSequence = *p.GroupSequence
		}
	}

	if len(am.ApplicationProperties) > 0 {
		m.Headers = am.ApplicationProperties
	}

	// Header.
	if h := am.Header; h != nil {
		m.Durable = h.Durable
		m.Priority = h.Priority
		m.TTL = h.TTL
		m.FirstAcquirer = h.FirstAcquirer
		m.DeliveryCount = h.DeliveryCount
	}

	m.Annotations = convAnnotationsIn(am.Annotations)
	m.DeliveryAnnotations = convAnnotationsIn(am.DeliveryAnnotations)
	m.Footer = convAnnotationsIn(am.Footer)
	return m
}

func convDeref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// convAnnotationsIn converts go-amqp's annotations to string keys: symbols
// (decoded by go-amqp as strings) stay as they are, integer keys from other
// clients become decimal strings, anything else its fmt rendering.
func convAnnotationsIn(in amqp.Annotations) map[string]any {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]any, len(in))
	for k, v := range in {
		var key string
		switch k := k.(type) {
		case string:
			key = k
		case amqp.Symbol:
			key = string(k)
		case uint64:
			key = strconv.FormatUint(k, 10)
		case int64:
			key = strconv.FormatInt(k, 10)
		case int:
			key = strconv.Itoa(k)
		case uint32:
			key = strconv.FormatUint(uint64(k), 10)
		case int32:
			key = strconv.FormatInt(int64(k), 10)
		default:
			key = fmt.Sprint(k)
		}
		out[key] = v
	}
	return out
}
