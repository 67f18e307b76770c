package inproc

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/sqlfilter"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// OffsetAnnotation is the message annotation that carries a stream
// delivery's offset, as RabbitMQ sends it: an int64.
const OffsetAnnotation = "x-stream-offset"

// FilterAnnotation is the message annotation a publisher gives a stream
// message's filter value in (transport.ReceiverOptions.StreamFilter).
const FilterAnnotation = "x-stream-filter-value"

// stream is an append-only log: a publish appends, and each receiver reads
// it with a cursor of its own, taking nothing off it. Nothing is ever
// truncated; a stream lives as long as its Broker.
type stream struct {
	name string

	mu  sync.Mutex
	log []logEntry
	// grew is closed, and replaced, by each append: what readers waiting
	// for the next offset select on.
	grew chan struct{}
}

type logEntry struct {
	s  *stored // holds a reference of its own, never released
	at time.Time
}

// stream finds the stream name, creating it: a publish or an attach to a
// stream that does not exist yet declares it, as RabbitMQ 4's dialect does.
func (b *Broker) stream(name string) *stream {
	if v, ok := b.streams.Load(name); ok {
		return v.(*stream)
	}
	v, _ := b.streams.LoadOrStore(name, &stream{name: name, grew: make(chan struct{})})
	return v.(*stream)
}

// append adds s at the end of the log.
func (st *stream) append(s *stored) {
	s.refs.Add(1)
	st.mu.Lock()
	st.log = append(st.log, logEntry{s: s, at: time.Now()})
	close(st.grew)
	st.grew = make(chan struct{})
	st.mu.Unlock()
}

// startLocked is the offset a receiver starting at o reads first.
func (st *stream) startLocked(o address.StreamOffset) int64 {
	n := int64(len(st.log))
	switch o.Kind() {
	case address.OffsetFirst:
		return 0
	case address.OffsetLast:
		return max(n-1, 0)
	case address.OffsetAt:
		return o.Offset()
	case address.OffsetSince:
		t := o.Time()
		return int64(sort.Search(len(st.log), func(i int) bool { return !st.log[i].at.Before(t) }))
	}
	return n
}

// StreamLen reports how many messages the stream name holds (0 when there is
// none).
func (b *Broker) StreamLen(name string) int {
	v, ok := b.streams.Load(name)
	if !ok {
		return 0
	}
	st := v.(*stream)
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.log)
}

// streamReceiver is a receiver link on a stream: it transfers the log from
// its cursor on, as far as its credit goes. Settling a transfer takes
// nothing off the log; a link that ends hands nothing back.
type streamReceiver struct {
	b       *Broker
	s       *session
	st      *stream
	addr    address.Address
	settled bool
	filter  address.StreamFilter
	sql     *sqlfilter.Filter // filter.SQL's, parsed; nil without one
	done    chan struct{}     // closed when the link ends
	credits chan struct{}     // one slot: "credit may have grown"

	mu        sync.Mutex // guards the fields below
	next      int64      // the offset the next transfer reads
	credit    uint64
	unsettled map[*amqp.Message]struct{}
	cause     error
}

var _ transport.Receiver = (*streamReceiver)(nil)

func (s *session) newStreamReceiver(o transport.ReceiverOptions) (transport.Receiver, error) {
	st := s.c.b.stream(o.Address.Name())
	r := &streamReceiver{b: s.c.b, s: s, st: st, addr: o.Address, settled: o.Settled, filter: o.StreamFilter,
		done: make(chan struct{}), credits: make(chan struct{}, 1)}
	if o.StreamFilter.SQL != "" {
		f, err := sqlfilter.Parse(o.StreamFilter.SQL)
		if err != nil {
			return nil, &transport.LinkError{Address: o.Address.String(), Op: "attach",
				Err: fmt.Errorf("%w: the broker refused the SQL stream filter: %v", transport.ErrNotSupported, err)}
		}
		r.sql = f
	}
	if !o.Settled {
		r.unsettled = make(map[*amqp.Message]struct{}, max(int(o.Credit), 16))
	}
	st.mu.Lock()
	r.next = st.startLocked(o.StreamOffset)
	st.mu.Unlock()
	r.b.register(r.addr, r)
	if err := s.add(r); err != nil {
		r.end(err)
		return nil, &transport.LinkError{Address: r.addr.String(), Op: "attach", Err: err}
	}
	return r, nil
}

func (r *streamReceiver) Address() string { return r.st.name }

func (r *streamReceiver) linkErr(op string, cause error) error {
	return &transport.LinkError{Address: r.addr.String(), Op: op, Err: cause}
}

// IssueCredit adds n to the link credit.
func (r *streamReceiver) IssueCredit(n uint32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cause != nil {
		return r.linkErr("receive", r.cause)
	}
	r.credit += uint64(n)
	select {
	case r.credits <- struct{}{}:
	default:
	}
	return nil
}

// Receive returns the next transfer, waiting until the log holds one and
// credit allows it, ctx is done or the link ends.
func (r *streamReceiver) Receive(ctx context.Context) (*amqp.Message, error) {
	for {
		m, grew, err := r.take()
		if m != nil || err != nil {
			return m, err
		}
		select {
		case <-grew:
		case <-r.credits:
		case <-r.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Prefetched returns a transfer the log and the credit allow now, or nil;
// see transport.Prefetcher.
func (r *streamReceiver) Prefetched() *amqp.Message {
	m, _, _ := r.take()
	return m
}

var _ transport.Prefetcher = (*streamReceiver)(nil)

// take transfers the entry at the cursor, if credit allows it and the log
// holds it; otherwise it returns what to wait on for the log to grow.
func (r *streamReceiver) take() (*amqp.Message, <-chan struct{}, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cause != nil {
		return nil, nil, r.linkErr("receive", r.cause)
	}
	r.st.mu.Lock()
	grew := r.st.grew
	var e logEntry
	have := false
	for r.credit > 0 && r.next < int64(len(r.st.log)) {
		e = r.st.log[r.next]
		if have = r.wants(e.s); have {
			break
		}
		r.next++ // filtered out: not transferred
	}
	r.st.mu.Unlock()
	if !have {
		if r.credit == 0 {
			grew = nil // only more credit helps
		}
		return nil, grew, nil
	}
	off := r.next
	r.next++
	r.credit--
	m := e.s.deliver(true, 0)
	if m.Annotations == nil {
		m.Annotations = amqp.Annotations{}
	}
	m.Annotations[OffsetAnnotation] = off
	if !r.settled {
		r.unsettled[m] = struct{}{}
	}
	return m, nil, nil
}

// wants reports whether s passes the link's filter: one of its filter
// values, each of its headers and properties, its SQL expression. The
// filter is exact, where RabbitMQ's bloom filter may let others through.
func (r *streamReceiver) wants(s *stored) bool {
	f := &r.filter
	if len(f.Values) > 0 {
		v, ok := s.ann[FilterAnnotation].(string)
		if !ok || !slices.Contains(f.Values, v) {
			return false
		}
	}
	for k, want := range f.Headers {
		if v, ok := s.app[k].(string); !ok || v != want {
			return false
		}
	}
	var props *amqp.MessageProperties
	if s.p != nil {
		props = &s.p.props
	}
	for k, want := range f.Properties {
		if v, ok := protocol.PropertyString(props, k); !ok || v != want {
			return false
		}
	}
	if r.sql != nil {
		var hdr *amqp.MessageHeader
		if s.hasHdr {
			hdr = &s.hdr
		}
		return r.sql.Match(protocol.FromAMQP(&amqp.Message{Header: hdr, Properties: props, ApplicationProperties: s.app}))
	}
	return true
}

// Settle ends the delivery m: a stream keeps every message, so the outcome
// only says the transfer is done.
func (r *streamReceiver) Settle(ctx context.Context, m *amqp.Message, o messages.Outcome) error {
	if r.settled {
		return nil
	}
	switch o.Kind {
	case messages.Accepted, messages.Rejected, messages.Released, messages.Modified:
	default:
		return fmt.Errorf("inproc: settle: unknown outcome %v", o.Kind)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cause != nil {
		return r.linkErr("settle", fmt.Errorf("%w: %w", ErrLinkEnded, r.cause))
	}
	if _, ok := r.unsettled[m]; !ok {
		return ErrUnknownDelivery
	}
	delete(r.unsettled, m)
	return nil
}

// Close detaches the link.
func (r *streamReceiver) Close(context.Context) error {
	r.end(&amqp.LinkError{})
	return nil
}

func (r *streamReceiver) end(cause error) {
	r.mu.Lock()
	if r.cause != nil {
		r.mu.Unlock()
		return
	}
	r.cause = cause
	r.unsettled = nil
	close(r.done)
	r.mu.Unlock()
	r.b.unregister(r.addr, r)
	r.s.forget(r)
}

func (r *streamReceiver) session() *session { return r.s }
