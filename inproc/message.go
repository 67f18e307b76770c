package inproc

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"time"
	"unicode/utf8"

	"github.com/Azure/go-amqp"
)

// The broker keeps no wire form. At publish it takes its own copy of the
// message (stored), checking that go-amqp could encode every value and
// normalising each value to what go-amqp's decoder would hand a receiver; at
// every delivery it copies the stored message again (box), so that no two
// deliveries, and no delivery and the publisher, share anything a receiver
// could change. Both copies are built to allocate little: one box holds the
// message, its header, its properties and the values its properties point
// to, and one byte slice holds every data section.

// box is one delivered *amqp.Message with its header and, for a single data
// section, its Data array, in one allocation; fullBox adds the properties.
type box struct {
	msg  amqp.Message
	hdr  amqp.MessageHeader
	data [1][]byte // Data when the message has exactly one section
}

// propBox is a message's properties with what they point to.
type propBox struct {
	props amqp.MessageProperties
	strs  [7]string // to, subject, reply-to, content-type, content-encoding, group-id, reply-to-group-id
	times [2]time.Time
	gseq  uint32
}

type fullBox struct {
	box
	propBox
}

// stored is the broker's copy of a published message. It is never changed
// once routed, so the entries a topic fans it out to share it. A message
// with properties is allocated as a storedFull, in one allocation.
type stored struct {
	hdr    amqp.MessageHeader
	p      *propBox // nil when the message has no properties
	da     amqp.Annotations
	ann    amqp.Annotations
	app    map[string]any
	data   [][]byte
	value  any
	seq    [][]any
	footer amqp.Annotations
	data1  [1][]byte // data's array when there is one section
	// count is the publisher's header delivery-count.
	count  uint32
	hasHdr bool
	// deep is set when some map, Value or Sequence element holds a value a
	// receiver could change in place (a []byte, list, map or array): each
	// delivery then copies those too; otherwise a shallow copy of the maps
	// is enough.
	deep bool
	used bool // first has been handed out
	// expires is when the message expires, in Unix milliseconds (the
	// earlier of arrival + header ttl and absolute-expiry-time); 0: never.
	expires int64
	// first is the entry of the first queue the message is routed to, so
	// that the usual, one-queue publish allocates it with the message.
	first entry
}

type storedFull struct {
	stored
	propBox
}

// entry returns a fresh entry for one more queue. Only the publisher calls
// it, before the message is visible.
func (s *stored) entry() *entry {
	if !s.used {
		s.used = true
		s.first = entry{msg: s, count: s.count}
		return &s.first
	}
	return &entry{msg: s, count: s.count}
}

// maxDepth bounds the nesting of lists and maps in a value (and stops a list
// that contains itself, which go-amqp would recurse into forever).
const maxDepth = 100

// errNilPointer reports a nil pointer value, which go-amqp would dereference.
var errNilPointer = errors.New("nil pointer")

// own makes the broker's copy of m. It fails, naming the section, when go-amqp
// could not encode m.
func own(m *amqp.Message) (*stored, error) {
	var s *stored
	if m.Properties != nil {
		f := &storedFull{}
		s = &f.stored
		s.p = &f.propBox
	} else {
		s = &stored{}
	}
	c := &copier{}
	if h := m.Header; h != nil {
		s.hdr = *h
		// The header's ttl goes on the wire as a uint of milliseconds.
		s.hdr.TTL = time.Duration(uint32(h.TTL/time.Millisecond)) * time.Millisecond
		s.hasHdr = true
		s.count = h.DeliveryCount
	}
	var err error
	if s.da, err = c.annotations(m.DeliveryAnnotations); err != nil {
		return nil, fmt.Errorf("inproc: delivery-annotations: %w", err)
	}
	if s.ann, err = c.annotations(m.Annotations); err != nil {
		return nil, fmt.Errorf("inproc: message-annotations: %w", err)
	}
	if m.Properties != nil {
		if err := c.properties(s.p, m.Properties); err != nil {
			return nil, fmt.Errorf("inproc: properties: %w", err)
		}
	}
	if ap := m.ApplicationProperties; ap != nil {
		s.app = make(map[string]any, len(ap))
		for k, v := range ap {
			if !utf8.ValidString(k) {
				return nil, fmt.Errorf("inproc: application-properties: key %q is not valid UTF-8", k)
			}
			if s.app[k], err = c.value(v, 0); err != nil {
				return nil, fmt.Errorf("inproc: application-properties %q: %w", k, err)
			}
		}
	}
	s.data = copyData(&s.data1, m.Data)
	if m.Value != nil {
		if s.value, err = c.value(m.Value, 0); err != nil {
			return nil, fmt.Errorf("inproc: amqp-value: %w", err)
		}
	}
	if len(m.Sequence) > 0 {
		s.seq = make([][]any, len(m.Sequence))
		for i, seq := range m.Sequence {
			v, err := c.value(seq, 0)
			if err != nil {
				return nil, fmt.Errorf("inproc: amqp-sequence: %w", err)
			}
			s.seq[i], _ = v.([]any)
		}
	}
	if s.footer, err = c.annotations(m.Footer); err != nil {
		return nil, fmt.Errorf("inproc: footer: %w", err)
	}
	s.deep = c.deep
	if s.hdr.TTL > 0 || s.p != nil && s.p.props.AbsoluteExpiryTime != nil {
		// The clock only for a message that can expire: reading it was
		// a tenth of the in-process CPU per message.
		s.expires = expiry(s, time.Now())
	}
	return s, nil
}

// expiry is when s, arriving now, expires (see stored.expires). The ttl
// counts from the publish, as a broker counts it from arrival; a time at or
// before the epoch is an expiry long past, not "never".
func expiry(s *stored, now time.Time) int64 {
	var at int64
	if s.hdr.TTL > 0 {
		at = now.Add(s.hdr.TTL).UnixMilli()
	}
	if s.p != nil && s.p.props.AbsoluteExpiryTime != nil {
		if abs := s.p.props.AbsoluteExpiryTime.UnixMilli(); at == 0 || abs < at {
			at = max(abs, 1)
		}
	}
	return at
}

// expiredAt reports whether the message has expired at now (Unix ms).
func (s *stored) expiredAt(now int64) bool { return s.expires != 0 && now >= s.expires }

// copyData copies the data sections into one new byte slice, re-sliced per
// section; one is put in one, so a single section needs no slice of its own.
// An empty section stays a non-nil empty slice, as go-amqp decodes it.
func copyData(one *[1][]byte, data [][]byte) [][]byte {
	if len(data) == 0 {
		return nil
	}
	n := 0
	for _, d := range data {
		n += len(d)
	}
	all := make([]byte, n)
	out := one[:]
	if len(data) > 1 {
		out = make([][]byte, len(data))
	}
	off := 0
	for i, d := range data {
		end := off + copy(all[off:], d)
		out[i] = all[off:end:end]
		off = end
	}
	return out
}

// deliver returns a new message for one delivery of s, independent of s and
// of every other delivery, with the broker's header fields.
func (s *stored) deliver(firstAcquirer bool, count uint32) *amqp.Message {
	b, pb := s.newBox()
	s.deliverInto(b, pb, firstAcquirer, count)
	return &b.msg
}

// newBox allocates what one delivery of s needs: pb is nil when s has no
// properties.
func (s *stored) newBox() (b *box, pb *propBox) {
	if s.p == nil {
		return new(box), nil
	}
	f := new(fullBox)
	return &f.box, &f.propBox
}

// deliverInto fills b and pb, from newBox. s is immutable: it needs no lock.
func (s *stored) deliverInto(b *box, pb *propBox, firstAcquirer bool, count uint32) {
	out := &b.msg
	if s.hasHdr {
		b.hdr = s.hdr
	} else {
		b.hdr = amqp.MessageHeader{Priority: 4}
	}
	b.hdr.FirstAcquirer = firstAcquirer
	b.hdr.DeliveryCount = count
	out.Header = &b.hdr
	if s.p != nil {
		p := &s.p.props
		pb.strs, pb.times, pb.gseq = s.p.strs, s.p.times, s.p.gseq
		b := pb
		b.props = amqp.MessageProperties{
			MessageID:          cloneValue(p.MessageID),
			UserID:             cloneBytes(p.UserID),
			CorrelationID:      cloneValue(p.CorrelationID),
			To:                 slot(p.To, &b.strs[0]),
			Subject:            slot(p.Subject, &b.strs[1]),
			ReplyTo:            slot(p.ReplyTo, &b.strs[2]),
			ContentType:        slot(p.ContentType, &b.strs[3]),
			ContentEncoding:    slot(p.ContentEncoding, &b.strs[4]),
			GroupID:            slot(p.GroupID, &b.strs[5]),
			ReplyToGroupID:     slot(p.ReplyToGroupID, &b.strs[6]),
			AbsoluteExpiryTime: slot(p.AbsoluteExpiryTime, &b.times[0]),
			CreationTime:       slot(p.CreationTime, &b.times[1]),
			GroupSequence:      slot(p.GroupSequence, &b.gseq),
		}
		out.Properties = &b.props
	}
	out.Data = copyData(&b.data, s.data)
	if s.deep {
		out.DeliveryAnnotations = cloneAnnotations(s.da)
		out.Annotations = cloneAnnotations(s.ann)
		if s.app != nil {
			out.ApplicationProperties = make(map[string]any, len(s.app))
			for k, v := range s.app {
				out.ApplicationProperties[k] = cloneValue(v)
			}
		}
		out.Value = cloneValue(s.value)
		if s.seq != nil {
			out.Sequence = make([][]any, len(s.seq))
			for i, seq := range s.seq {
				out.Sequence[i], _ = cloneValue(seq).([]any)
			}
		}
		out.Footer = cloneAnnotations(s.footer)
		return
	}
	// Every value is immutable: the maps alone need copying.
	out.DeliveryAnnotations = maps.Clone(s.da)
	out.Annotations = maps.Clone(s.ann)
	out.ApplicationProperties = maps.Clone(s.app)
	out.Value = s.value
	out.Footer = maps.Clone(s.footer)
}

// slot points a copy's field at its own slot when the original is set.
func slot[T any](p, to *T) *T {
	if p == nil {
		return nil
	}
	return to
}

// copier validates and copies the values of one published message.
type copier struct {
	deep bool // some value needs a deep copy at delivery
}

// properties copies p into b, the pointed-to values into b's slots.
func (c *copier) properties(b *propBox, p *amqp.MessageProperties) error {
	var err error
	q := &b.props
	if q.MessageID, err = c.value(p.MessageID, 0); err != nil {
		return fmt.Errorf("message-id: %w", err)
	}
	if q.CorrelationID, err = c.value(p.CorrelationID, 0); err != nil {
		return fmt.Errorf("correlation-id: %w", err)
	}
	if len(p.UserID) > 0 {
		q.UserID = append([]byte(nil), p.UserID...)
	}
	strs := []struct {
		in, out **string
		sym     bool
	}{
		{&p.To, &q.To, false},
		{&p.Subject, &q.Subject, false},
		{&p.ReplyTo, &q.ReplyTo, false},
		{&p.ContentType, &q.ContentType, true},
		{&p.ContentEncoding, &q.ContentEncoding, true},
		{&p.GroupID, &q.GroupID, false},
		{&p.ReplyToGroupID, &q.ReplyToGroupID, false},
	}
	for i, f := range strs {
		if *f.in == nil {
			continue
		}
		if !f.sym && !utf8.ValidString(**f.in) {
			return errors.New("string is not valid UTF-8")
		}
		b.strs[i] = **f.in
		*f.out = &b.strs[i]
	}
	if t := p.AbsoluteExpiryTime; t != nil {
		b.times[0] = millis(*t)
		q.AbsoluteExpiryTime = &b.times[0]
	}
	if t := p.CreationTime; t != nil {
		b.times[1] = millis(*t)
		q.CreationTime = &b.times[1]
	}
	if p.GroupSequence != nil {
		b.gseq = *p.GroupSequence
		q.GroupSequence = &b.gseq
	}
	return nil
}

// millis is t as an AMQP timestamp decodes: whole milliseconds, local time.
func millis(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()) }

func (c *copier) annotations(a amqp.Annotations) (amqp.Annotations, error) {
	if a == nil {
		return nil, nil
	}
	out := make(amqp.Annotations, len(a))
	for k, v := range a {
		kk, err := annotationKey(k)
		if err != nil {
			return nil, err
		}
		if out[kk], err = c.value(v, 0); err != nil {
			return nil, fmt.Errorf("%v: %w", k, err)
		}
	}
	return out, nil
}

// value checks that go-amqp can encode v and returns the broker's own copy of
// it, normalised as go-amqp decodes it: int as int64, uint as uint64, a
// symbol as a string, amqp.Null as nil, a time in whole milliseconds, a
// pointer as what it points to, a map with only string keys as a
// map[string]any, an empty list as nil. The common types are copied here;
// go-amqp's other encodable types (arrays, described values) take a trip
// through its codec, which is exact.
func (c *copier) value(v any, depth int) (any, error) {
	switch t := v.(type) {
	case nil, bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
		float32, float64, amqp.UUID:
		return v, nil
	case string:
		if !utf8.ValidString(t) {
			return nil, errors.New("string is not valid UTF-8")
		}
		return v, nil
	case int:
		return int64(t), nil
	case uint:
		return uint64(t), nil
	case amqp.Symbol:
		return string(t), nil
	case amqp.Null:
		return nil, nil
	case time.Time:
		return millis(t), nil
	case []byte:
		c.deep = true
		return append(make([]byte, 0, len(t)), t...), nil
	}
	if depth >= maxDepth {
		return nil, errors.New("lists and maps nested too deep")
	}
	switch t := v.(type) {
	case []any:
		c.deep = true
		if len(t) == 0 {
			return []any(nil), nil
		}
		out := make([]any, len(t))
		for i, e := range t {
			var err error
			if out[i], err = c.value(e, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		c.deep = true
		if len(t) == 0 {
			return map[any]any{}, nil
		}
		out := make(map[string]any, len(t))
		for k, e := range t {
			if !utf8.ValidString(k) {
				return nil, errors.New("string is not valid UTF-8")
			}
			var err error
			if out[k], err = c.value(e, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[any]any:
		return c.anyMap(t, depth, false)
	case amqp.Annotations:
		return c.anyMap(t, depth, true)
	case map[amqp.Symbol]any:
		m := make(map[any]any, len(t))
		for k, e := range t {
			m[k] = e
		}
		return c.anyMap(m, depth, false)
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !isMarshaler(v) {
		// go-amqp encodes a pointer to any of its plain types as the value.
		if rv.IsNil() {
			return nil, errNilPointer
		}
		e := rv.Elem().Interface()
		if reflect.TypeOf(e).Kind() == reflect.Pointer {
			return nil, fmt.Errorf("unsupported type %T", v)
		}
		return c.value(e, depth+1)
	}
	c.deep = true
	return viaCodec(v)
}

// anyMap copies a map with keys of any type (the keys of annotations when
// ann is set); like go-amqp's decoder it returns a map[string]any when every
// key is a string or symbol.
func (c *copier) anyMap(t map[any]any, depth int, ann bool) (any, error) {
	c.deep = true
	out := make(map[any]any, len(t))
	strKeys := true
	for k, e := range t {
		var kk any
		var err error
		if ann {
			kk, err = annotationKey(k)
		} else {
			kk, err = c.value(k, depth+1)
		}
		if err != nil {
			return nil, err
		}
		if _, ok := kk.(string); !ok {
			strKeys = false
		}
		if out[kk], err = c.value(e, depth+1); err != nil {
			return nil, err
		}
	}
	if !strKeys || len(out) == 0 {
		return out, nil
	}
	m := make(map[string]any, len(out))
	for k, e := range out {
		m[k.(string)] = e
	}
	return m, nil
}

// annotationKey checks and normalises a key of amqp.Annotations: go-amqp
// sends string keys as symbols and int keys as longs.
func annotationKey(k any) (any, error) {
	switch k := k.(type) {
	case string, int64:
		return k, nil
	case amqp.Symbol:
		return string(k), nil
	case int:
		return int64(k), nil
	}
	return nil, fmt.Errorf("unsupported annotations key type %T", k)
}

// viaCodec copies v by encoding and decoding it, for the types go-amqp knows
// that the copier does not name. It fails for what go-amqp cannot encode.
func viaCodec(v any) (out any, err error) {
	if !encodable(v) {
		return nil, fmt.Errorf("unsupported type %T", v)
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return nil, errNilPointer
	}
	defer func() {
		// go-amqp dereferences what it is given; a nil pointer deep inside
		// a described value must fail the send, not the broker.
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("cannot encode %T: %v", v, r)
		}
	}()
	data, err := (&amqp.Message{Value: v}).MarshalBinary()
	if err != nil {
		return nil, err
	}
	var m amqp.Message
	if err := m.UnmarshalBinary(data); err != nil {
		return nil, err
	}
	return m.Value, nil
}

// encodable reports whether v is of one of the types go-amqp's encoder
// accepts besides those the copier names: its typed arrays and its own
// types.
func encodable(v any) bool {
	switch v.(type) {
	case []int8, []uint16, []int16, []uint32, []int32, []uint64, []int64,
		[]float32, []float64, []bool, []string, []amqp.Symbol, [][]byte,
		[]time.Time, []amqp.UUID, []map[any]any:
		return true
	}
	return isMarshaler(v)
}

// marshaler is go-amqp's internal marshaler interface, instantiated with its
// internal buffer type by inference from one of its exported methods. Only
// go-amqp's own types can implement it.
type marshaler[B any] interface{ Marshal(*B) error }

func marshalerCheck[B any](func(*B) error) func(any) bool {
	return func(v any) bool {
		_, ok := v.(marshaler[B])
		return ok
	}
}

var isMarshaler = marshalerCheck(amqp.Null{}.Marshal)

// cloneValue copies what a receiver could change in place: byte slices,
// lists and maps, recursively. Values are already normalised.
func cloneValue(v any) any {
	switch t := v.(type) {
	case nil, bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
		float32, float64, string, time.Time, amqp.UUID:
		return v
	case []byte:
		return append(make([]byte, 0, len(t)), t...)
	case []any:
		if t == nil {
			return t
		}
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = cloneValue(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = cloneValue(e)
		}
		return out
	case map[any]any:
		out := make(map[any]any, len(t))
		for k, e := range t {
			out[k] = cloneValue(e)
		}
		return out
	}
	// Arrays and go-amqp's own types: copied the way they were made.
	out, err := viaCodec(v)
	if err != nil {
		return v // cannot happen: the value came out of the codec
	}
	return out
}

func cloneAnnotations(a amqp.Annotations) amqp.Annotations {
	if a == nil {
		return nil
	}
	out := make(amqp.Annotations, len(a))
	for k, v := range a {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}
