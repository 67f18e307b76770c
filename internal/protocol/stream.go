package protocol

import (
	"slices"
	"sort"
	"sync"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
)

// OffsetAnnotation is the message annotation a stream delivery carries its
// offset in.
const OffsetAnnotation = "x-stream-offset"

// StreamCursor is where a subscription to a stream is: every link of it,
// across re-attaches, lost connections and restarts of its actors, starts
// after what the handlers settled, so nothing is skipped and only what was
// in flight is read again. It is shared by the subscription's receivers
// (through SubscriptionSpec.Stream): Delivered runs on a link's pump,
// Settled on its workers, Begin on the receiver actor.
type StreamCursor struct {
	start address.StreamOffset // where the first link starts
	// filter is what the subscription asked for. The broker's bloom
	// filter lets other messages through, and a broker before RabbitMQ 4.1
	// ignores the property filters: Wants checks them again. An SQL
	// filter is the broker's alone (it refuses what it cannot evaluate).
	filter address.StreamFilter

	mu sync.Mutex
	// gen is the link the pending offsets came on; a settle of another
	// link's delivery is that link's, which has ended.
	gen uint64
	// pending lists the offsets delivered on gen, in order, and whether
	// each is settled; the first is the oldest not settled.
	pending []pendingOffset
	// next is where the next link starts once one delivery was seen: past
	// every offset settled in order; -1 before any.
	next int64
	// skip holds the offsets past next that an earlier link's handlers
	// settled: a later link reads them again, and they are not handled
	// twice.
	skip map[int64]struct{}
}

type pendingOffset struct {
	off  int64
	done bool
}

// FilterAnnotation is the message annotation that carries a stream
// message's filter value.
const FilterAnnotation = "x-stream-filter-value"

// NewStreamCursor returns a cursor whose first link starts at start and
// whose handlers get only the messages f asks for.
func NewStreamCursor(start address.StreamOffset, f address.StreamFilter) *StreamCursor {
	return &StreamCursor{start: start, filter: f, next: -1}
}

// Filter is what the subscription asked for.
func (c *StreamCursor) Filter() address.StreamFilter { return c.filter }

// Wants reports whether m is for the handlers: it passes the filter's
// values, headers and properties (those asked for).
func (c *StreamCursor) Wants(m *amqp.Message) bool {
	f := &c.filter
	if len(f.Values) == 0 && len(f.Headers) == 0 && len(f.Properties) == 0 {
		return true
	}
	if m == nil {
		return false
	}
	if len(f.Values) > 0 {
		v, ok := m.Annotations[FilterAnnotation].(string)
		if !ok || !slices.Contains(f.Values, v) {
			return false
		}
	}
	for k, want := range f.Headers {
		if v, ok := m.ApplicationProperties[k].(string); !ok || v != want {
			return false
		}
	}
	for k, want := range f.Properties {
		if v, ok := PropertyString(m.Properties, k); !ok || v != want {
			return false
		}
	}
	return true
}

// PropertyString is the properties-section field named k (its AMQP name,
// address.StreamFilterFields) as a string: user-id's bytes as they are,
// an id only when it is a string.
func PropertyString(p *amqp.MessageProperties, k string) (string, bool) {
	if p == nil {
		return "", false
	}
	var v *string
	switch k {
	case "message-id", "correlation-id":
		id := p.MessageID
		if k == "correlation-id" {
			id = p.CorrelationID
		}
		s, ok := id.(string)
		return s, ok
	case "user-id":
		return string(p.UserID), p.UserID != nil
	case "to":
		v = p.To
	case "subject":
		v = p.Subject
	case "reply-to":
		v = p.ReplyTo
	case "content-type":
		v = p.ContentType
	case "content-encoding":
		v = p.ContentEncoding
	case "group-id":
		v = p.GroupID
	case "reply-to-group-id":
		v = p.ReplyToGroupID
	}
	if v == nil {
		return "", false
	}
	return *v, true
}

// Start is where the subscription's first link starts.
func (c *StreamCursor) Start() address.StreamOffset { return c.start }

// Begin is called as a link attaches: it returns where that link starts,
// the first unsettled offset of the links before (or past the last one
// settled), or the subscription's own StreamOffset while nothing was read,
// and the gen that link's Delivered and Settled name it by. What an
// earlier link delivers or settles after this is not counted: its
// deliveries are read again.
func (c *StreamCursor) Begin() (address.StreamOffset, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) > 0 {
		c.next = c.pending[0].off
		for _, p := range c.pending[1:] {
			if p.done {
				if c.skip == nil {
					c.skip = map[int64]struct{}{}
				}
				c.skip[p.off] = struct{}{}
			}
		}
	}
	c.gen++
	c.pending = c.pending[:0]
	if c.next < 0 {
		return c.start, c.gen
	}
	return address.StreamAt(c.next), c.gen
}

// Delivered records a transfer of link gen; settled says it came settled
// (at-most-once), which counts as read at once. It reports a transfer an
// earlier link's handler settled already: the caller settles it without
// handling it again.
func (c *StreamCursor) Delivered(gen uint64, m *amqp.Message, settled bool) (handled bool) {
	off, ok := Offset(m)
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return false
	}
	if _, handled = c.skip[off]; handled {
		delete(c.skip, off)
		if len(c.skip) == 0 {
			c.skip = nil
		}
		settled = true
	}
	if settled && len(c.pending) == 0 {
		c.next = off + 1
		return handled
	}
	c.pending = append(c.pending, pendingOffset{off: off, done: settled})
	c.advanceLocked()
	return handled
}

// Settled records that the handler's outcome for a transfer of link gen
// is decided.
func (c *StreamCursor) Settled(gen uint64, m *amqp.Message) {
	off, ok := Offset(m)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	i := sort.Search(len(c.pending), func(i int) bool { return c.pending[i].off >= off })
	if i == len(c.pending) || c.pending[i].off != off {
		return
	}
	c.pending[i].done = true
	c.advanceLocked()
}

func (c *StreamCursor) advanceLocked() {
	i := 0
	for i < len(c.pending) && c.pending[i].done {
		c.next = c.pending[i].off + 1
		i++
	}
	if i > 0 {
		c.pending = append(c.pending[:0], c.pending[i:]...)
	}
}

// Offset reads a stream transfer's offset from its annotations.
func Offset(m *amqp.Message) (int64, bool) {
	if m == nil || m.Annotations == nil {
		return 0, false
	}
	switch v := m.Annotations[OffsetAnnotation].(type) {
	case int64:
		return v, true
	case uint64:
		return int64(v), true
	case int32:
		return int64(v), true
	case int:
		return int64(v), true
	}
	return 0, false
}
