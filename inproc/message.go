package inproc

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/internal/amqptypes"
)

// The broker keeps no wire form. At publish it takes its own copy of the
// message (stored), checking that go-amqp could encode every value and
// normalising each value to what go-amqp's decoder would hand a receiver; at
// every delivery it copies the stored message again (box), so that no two
// deliveries, and no delivery and the publisher, share anything a receiver
// could change. Both copies are built to allocate little: one box holds the
// message, its header, its properties and the values its properties point
// to, and one byte slice holds every data section. The stored copy goes back
// to a pool once every queue it was routed to has had it accepted (see
// stored.refs), its body memory with it. What go-amqp can encode,
// and what it decodes each value to, is internal/amqptypes' table, which
// the Message conversion checks against too.

// box is one delivered *amqp.Message with its header and, for a single data
// section, its Data array, in one allocation; fullBox adds the properties.
type box struct {
	msg  amqp.Message
	hdr  amqp.MessageHeader
	data [1][]byte // Data when the message has exactly one section
	// buf is the data sections' memory, kept across the pool's reuses.
	buf []byte
	// full is set when the box is a fullBox's.
	full *fullBox
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
	// refs counts the entries that may still read the message, plus one
	// for its publisher until routing is done; at zero it goes back to
	// its pool. Only the publisher's routing and an accepted (or
	// pre-settled) delivery count down: a message that leaves any other
	// way (expired, dead-lettered, its queue deleted, a transaction) is
	// left to the collector, which is always safe.
	refs atomic.Int32
	// buf is the data sections' memory, kept across the pool's reuses.
	buf []byte
	// full is set when s is the stored of a storedFull.
	full *storedFull
}

type storedFull struct {
	stored
	propBox
}

// The broker's copies are recycled once accepted: with no network in the
// way, garbage collection is what bounds the in-process path. Each kind has
// its own pool, so a reused one has the same shape.
var (
	storedPool     = sync.Pool{New: func() any { return new(stored) }}
	storedFullPool = sync.Pool{New: func() any { return new(storedFull) }}
)

// maxPooledBody bounds the body memory a pooled copy keeps, so that one
// large message does not pin its size in every pool slot.
const maxPooledBody = 64 << 10

// repool puts a copy back in the pool of its shape: full's (the variant
// with properties that embeds lean) when it is one, else lean's. A body
// buffer larger than maxPooledBody is dropped first.
func repool[L, F any](buf *[]byte, lean *L, full *F, leanPool, fullPool *sync.Pool) {
	if cap(*buf) > maxPooledBody {
		*buf = nil
	}
	if full != nil {
		fullPool.Put(full)
	} else {
		leanPool.Put(lean)
	}
}

// newStored takes a cleared stored from its pool, with the publisher's
// reference.
func newStored(props bool) *stored {
	var s *stored
	if props {
		f := storedFullPool.Get().(*storedFull)
		buf := f.buf
		*f = storedFull{}
		s = &f.stored
		s.buf, s.p, s.full = buf, &f.propBox, f
	} else {
		s = storedPool.Get().(*stored)
		buf := s.buf
		*s = stored{}
		s.buf = buf
	}
	s.refs.Store(1)
	return s
}

// release drops one reference to s; the last one returns s to its pool.
// Nothing may read s (or an entry of it) after its own release.
func (s *stored) release() {
	if s.refs.Add(-1) != 0 {
		return
	}
	repool(&s.buf, s, s.full, &storedPool, &storedFullPool)
}

// entry returns a fresh entry for one more queue. Only the publisher calls
// it, before the message is visible.
func (s *stored) entry() *entry {
	s.refs.Add(1)
	if !s.used {
		s.used = true
		s.first = entry{msg: s, count: s.count}
		return &s.first
	}
	return &entry{msg: s, count: s.count}
}

// own makes the broker's copy of m, holding the publisher's reference (see
// stored.refs). It fails, naming the section, when go-amqp could not encode
// m.
// subject is the message's subject, its routing key on a topic.
func (s *stored) subject() string {
	if s.p == nil || s.p.props.Subject == nil {
		return ""
	}
	return *s.p.props.Subject
}

func own(m *amqp.Message) (*stored, error) {
	s := newStored(m.Properties != nil)
	c := &copier{Copier: amqptypes.Copier{Rules: amqptypes.Wire}}
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
			if s.app[k], err = c.Value(v, 0); err != nil {
				return nil, fmt.Errorf("inproc: application-properties %q: %w", k, err)
			}
		}
	}
	s.data = copyData(&s.data1, m.Data, &s.buf)
	if m.Value != nil {
		if s.value, err = c.Value(m.Value, 0); err != nil {
			return nil, fmt.Errorf("inproc: amqp-value: %w", err)
		}
	}
	if len(m.Sequence) > 0 {
		s.seq = make([][]any, len(m.Sequence))
		for i, seq := range m.Sequence {
			v, err := c.Value(seq, 0)
			if err != nil {
				return nil, fmt.Errorf("inproc: amqp-sequence: %w", err)
			}
			s.seq[i], _ = v.([]any)
		}
	}
	if s.footer, err = c.annotations(m.Footer); err != nil {
		return nil, fmt.Errorf("inproc: footer: %w", err)
	}
	s.deep = c.Deep
	if s.hdr.TTL > 0 || s.p != nil && s.p.props.AbsoluteExpiryTime != nil {
		// The clock only for a message that can expire: a clock read on
		// every message is a cost on the hot path nobody needs.
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
// An empty section stays a non-nil empty slice, as go-amqp decodes it. When
// buf is not nil the bytes go in *buf, grown if it is too small.
func copyData(one *[1][]byte, data [][]byte, buf *[]byte) [][]byte {
	if len(data) == 0 {
		return nil
	}
	n := 0
	for _, d := range data {
		n += len(d)
	}
	var all []byte
	if buf != nil && *buf != nil && cap(*buf) >= n {
		all = (*buf)[:n]
	} else {
		all = make([]byte, n)
		if buf != nil {
			*buf = all
		}
	}
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

// Delivered copies come back to these pools from a receiver whose user
// promised not to read them once settled (transport.Recycler).
var (
	boxPool     = sync.Pool{New: func() any { return new(box) }}
	fullBoxPool = sync.Pool{New: func() any { return new(fullBox) }}
)

// newBox takes what one delivery of s needs from its pool, cleared: pb is
// nil when s has no properties.
func (s *stored) newBox() (b *box, pb *propBox) {
	if s.p == nil {
		b = boxPool.Get().(*box)
		*b = box{buf: b.buf}
		return b, nil
	}
	f := fullBoxPool.Get().(*fullBox)
	buf := f.buf
	*f = fullBox{}
	f.buf, f.full = buf, f
	return &f.box, &f.propBox
}

// recycle returns b to its pool. Nothing may read b, its message or its
// data sections afterwards.
func (b *box) recycle() {
	repool(&b.buf, b, b.full, &boxPool, &fullBoxPool)
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
			MessageID:          amqptypes.Clone(p.MessageID),
			UserID:             cloneBytes(p.UserID),
			CorrelationID:      amqptypes.Clone(p.CorrelationID),
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
	out.Data = copyData(&b.data, s.data, &b.buf)
	if s.deep {
		out.DeliveryAnnotations = cloneAnnotations(s.da)
		out.Annotations = cloneAnnotations(s.ann)
		if s.app != nil {
			out.ApplicationProperties = make(map[string]any, len(s.app))
			for k, v := range s.app {
				out.ApplicationProperties[k] = amqptypes.Clone(v)
			}
		}
		out.Value = amqptypes.Clone(s.value)
		if s.seq != nil {
			out.Sequence = make([][]any, len(s.seq))
			for i, seq := range s.seq {
				out.Sequence[i], _ = amqptypes.Clone(seq).([]any)
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

// copier validates and copies the values of one published message, as
// go-amqp's encoder and decoder would (Deep: some value needs a deep copy at
// delivery).
type copier struct {
	amqptypes.Copier
}

// properties copies p into b, the pointed-to values into b's slots.
func (c *copier) properties(b *propBox, p *amqp.MessageProperties) error {
	var err error
	q := &b.props
	if q.MessageID, err = c.Value(p.MessageID, 0); err != nil {
		return fmt.Errorf("message-id: %w", err)
	}
	if q.CorrelationID, err = c.Value(p.CorrelationID, 0); err != nil {
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
		b.times[0] = amqptypes.Millis(*t)
		q.AbsoluteExpiryTime = &b.times[0]
	}
	if t := p.CreationTime; t != nil {
		b.times[1] = amqptypes.Millis(*t)
		q.CreationTime = &b.times[1]
	}
	if p.GroupSequence != nil {
		b.gseq = *p.GroupSequence
		q.GroupSequence = &b.gseq
	}
	return nil
}

func (c *copier) annotations(a amqp.Annotations) (amqp.Annotations, error) {
	if a == nil {
		return nil, nil
	}
	out := make(amqp.Annotations, len(a))
	for k, v := range a {
		kk, ok := amqptypes.AnnotationKey(k)
		if !ok {
			return nil, fmt.Errorf("unsupported annotations key type %T", k)
		}
		var err error
		if out[kk], err = c.Value(v, 0); err != nil {
			return nil, fmt.Errorf("%v: %w", k, err)
		}
	}
	return out, nil
}

func cloneAnnotations(a amqp.Annotations) amqp.Annotations {
	if a == nil {
		return nil
	}
	out := make(amqp.Annotations, len(a))
	for k, v := range a {
		out[k] = amqptypes.Clone(v)
	}
	return out
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}
