package protocol

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	amqp "github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/internal/amqptypes"
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
//	Durable, Transient       header section, always: durable=true unless Transient
//	                         is set and Durable is not
//	TTL, ...                 header section
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
// Neither function copies payloads: the result of ToAMQP shares Body, UserID,
// Headers, the ids and Value with m (the property strings and times it
// keeps in its own memory, so that it holds no pointer to m itself) and the
// result of FromAMQP shares Body and Headers with am. Neither side may be
// changed while the other is in use.

// convMaxTTL is the largest TTL the header's uint milliseconds can carry.
const convMaxTTL = time.Duration(math.MaxUint32) * time.Millisecond

// convMaxDepth bounds the nesting of lists and maps inside annotations and
// amqp-value bodies (and stops a self-referencing []any).
const convMaxDepth = 64

// The range of an AMQP timestamp, which go-amqp would wrap silently.
var (
	convMinTime = amqptypes.MinTime
	convMaxTime = amqptypes.MaxTime
)

// What ToAMQP accepts on top of go-amqp: no pointers (the Message fields
// hold values) and timestamps in range; application-properties take AMQP
// primitives only (convFlat), the other sections lists and maps too.
var (
	convCompound = amqptypes.Rules{Compound: true, TimeRange: true, MaxDepth: convMaxDepth}
	convFlat     = amqptypes.Rules{TimeRange: true, MaxDepth: convMaxDepth}
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
	props convProps
}

// convProps is a message's properties with the slots their pointers point
// to: the properties never point into the Message, so that a Message a
// caller publishes need not leave its stack.
type convProps struct {
	p     amqp.MessageProperties
	strs  [7]string // content-type, content-encoding, reply-to, subject, to, group-id, reply-to-group-id
	times [2]time.Time
	gseq  uint32
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
// memory (App.Publish keeps them in a sync.Pool: on a fast path the garbage
// collector's work is what bounds the rate). The zero value is ready to
// use.
type Outgoing struct {
	f convFull
	// props: the last Map used f.props, which Reset then clears.
	props bool
}

// Map is ToAMQP into o's memory. The result is valid until the next Map or
// Reset of o.
func (o *Outgoing) Map(m *messages.Message) (*amqp.Message, error) {
	if m == nil {
		return nil, errors.New("messages: ToAMQP of a nil message")
	}
	o.Reset()
	var props *convProps
	if convHasProperties(m) {
		props, o.props = &o.f.props, true
	}
	return toAMQP(m, &o.f.convBundle, props)
}

// Reset drops every reference o holds into the last mapped message.
func (o *Outgoing) Reset() {
	o.f.convBundle = convBundle{}
	if o.props {
		o.f.props, o.props = convProps{}, false
	}
}

// toAMQP fills b (and props, when m has properties) with m's sections.
func toAMQP(m *messages.Message, b *convBundle, props *convProps) (*amqp.Message, error) {
	am := &b.msg

	// Body.
	if m.Body == nil && m.Value != nil {
		if reason, bad := amqptypes.Check(m.Value, convCompound, 0); reason != "" {
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
		am.Properties = &props.p
	}

	// Application properties.
	if len(m.Headers) > 0 {
		for k, v := range m.Headers {
			if !utf8.ValidString(k) {
				return nil, fmt.Errorf("messages: header %q: key is not valid UTF-8", k)
			}
			if reason, bad := amqptypes.Check(v, convFlat, 0); reason != "" {
				return nil, fmt.Errorf("messages: header %q: %s %T", k, reason, bad)
			}
		}
		am.ApplicationProperties = m.Headers
	}

	// Header.
	if m.TTL < 0 || m.TTL > convMaxTTL {
		return nil, fmt.Errorf("messages: TTL %v out of range (0 to %v)", m.TTL, convMaxTTL)
	}
	// The header always goes out, durable unless the user asked otherwise:
	// without one, RabbitMQ 4.2+ and Artemis store the message transient.
	h := &b.hdr
	h.Durable = m.Durable || !m.Transient
	h.Priority = m.Priority
	if h.Priority == 0 {
		h.Priority = 4 // not set: go-amqp leaves the default off the wire
	}
	h.TTL = (m.TTL + time.Millisecond - 1) / time.Millisecond * time.Millisecond
	h.FirstAcquirer = m.FirstAcquirer
	h.DeliveryCount = m.DeliveryCount
	am.Header = h

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

// convProperties validates m's properties and fills cp with them.
func convProperties(m *messages.Message, cp *convProps) error {
	p, err := &cp.p, error(nil)
	if p.MessageID, err = convID("MessageID", m.MessageID); err != nil {
		return err
	}
	if p.CorrelationID, err = convID("CorrelationID", m.CorrelationID); err != nil {
		return err
	}
	// content-type and content-encoding are symbols: go-amqp converts them.
	p.ContentType = convSym(m.ContentType, &cp.strs[0])
	p.ContentEncoding = convSym(m.ContentEncoding, &cp.strs[1])
	if p.ReplyTo, err = convStr("ReplyTo", m.ReplyTo, &cp.strs[2]); err != nil {
		return err
	}
	if p.Subject, err = convStr("Subject", m.Subject, &cp.strs[3]); err != nil {
		return err
	}
	if p.To, err = convStr("To", m.To, &cp.strs[4]); err != nil {
		return err
	}
	if p.GroupID, err = convStr("GroupID", m.GroupID, &cp.strs[5]); err != nil {
		return err
	}
	if p.ReplyToGroupID, err = convStr("ReplyToGroupID", m.ReplyToGroupID, &cp.strs[6]); err != nil {
		return err
	}
	if len(m.UserID) > 0 {
		p.UserID = m.UserID
	}
	if p.CreationTime, err = convTime("CreationTime", m.CreationTime, &cp.times[0]); err != nil {
		return err
	}
	if p.AbsoluteExpiryTime, err = convTime("AbsoluteExpiryTime", m.AbsoluteExpiryTime, &cp.times[1]); err != nil {
		return err
	}
	if m.GroupSequence != 0 {
		cp.gseq = m.GroupSequence
		p.GroupSequence = &cp.gseq
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

// convSym, convStr and convTime put a set field in its slot and point at it.
func convSym(s string, slot *string) *string {
	if s == "" {
		return nil
	}
	*slot = s
	return slot
}

func convStr(field, s string, slot *string) (*string, error) {
	if s == "" {
		return nil, nil
	}
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("messages: %s: string is not valid UTF-8", field)
	}
	*slot = s
	return slot, nil
}

func convTime(field string, t time.Time, slot *time.Time) (*time.Time, error) {
	if t.IsZero() {
		return nil, nil
	}
	if !convTimeInRange(t) {
		return nil, fmt.Errorf("messages: %s: %v is outside the AMQP timestamp range", field, t)
	}
	*slot = t
	return slot, nil
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
		if reason, bad := amqptypes.Check(v, convCompound, 0); reason != "" {
			return nil, fmt.Errorf("messages: %s %q: %s %T", what, k, reason, bad)
		}
		out[k] = v
	}
	return out, nil
}

// FromAMQP maps a received AMQP message onto a Message. It never fails and
// never panics: absent sections leave their fields empty, values of
// unexpected types are passed through as go-amqp decoded them, and a nil am
// gives nil. The result shares Body and Headers with am (see above).
func FromAMQP(am *amqp.Message) *messages.Message {
	if am == nil {
		return nil
	}
	m := &messages.Message{}
	switch len(am.Data) {
	case 0:
	case 1:
		m.Body = am.Data[0]
	default:
		m.Body = convJoin(make([]byte, 0, convDataLen(am.Data)), am.Data)
	}
	fromAMQP(am, m)
	return m
}

// The Message and a small Body of FromAMQPOwned in one allocation.
type (
	convOwned128 struct {
		m    messages.Message
		body [128]byte
	}
	convOwned512 struct {
		m    messages.Message
		body [512]byte
	}
)

// FromAMQPOwned is FromAMQP for a transfer whose memory the transport
// reuses once it is settled (transport.Recycler): the Body is copied, into
// the same allocation as the Message when it is at most 512 bytes. What
// else the result shares with am (Headers, binary ids, values) the
// transport makes afresh for each delivery.
func FromAMQPOwned(am *amqp.Message) *messages.Message {
	if am == nil {
		return nil
	}
	var m *messages.Message
	n := convDataLen(am.Data)
	var buf []byte
	switch {
	case len(am.Data) == 0:
		m = &messages.Message{}
	case n <= 128:
		o := &convOwned128{}
		m, buf = &o.m, o.body[:0:n]
	case n <= 512:
		o := &convOwned512{}
		m, buf = &o.m, o.body[:0:n]
	default:
		m = &messages.Message{}
		buf = make([]byte, 0, n)
	}
	if len(am.Data) > 0 {
		m.Body = convJoin(buf, am.Data)
	}
	fromAMQP(am, m)
	return m
}

func convDataLen(data [][]byte) int {
	n := 0
	for _, d := range data {
		n += len(d)
	}
	return n
}

// convJoin appends the data sections to body, which has room for them.
func convJoin(body []byte, data [][]byte) []byte {
	for _, d := range data {
		body = append(body, d...)
	}
	return body
}

// fromAMQP fills m, whose Body is set, with everything else of am.
func fromAMQP(am *amqp.Message, m *messages.Message) {
	m.Priority = 4
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
	m.Transient = true // no header: AMQP's default, durable=false
	if h := am.Header; h != nil {
		m.Durable = h.Durable
		m.Transient = !h.Durable
		m.Priority = h.Priority
		m.TTL = h.TTL
		m.FirstAcquirer = h.FirstAcquirer
		m.DeliveryCount = h.DeliveryCount
	}

	m.Annotations = convAnnotationsIn(am.Annotations)
	m.DeliveryAnnotations = convAnnotationsIn(am.DeliveryAnnotations)
	m.Footer = convAnnotationsIn(am.Footer)
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
