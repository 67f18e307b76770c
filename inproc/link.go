package inproc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// ErrLinkEnded is wrapped (inside a *transport.LinkError with Op "settle") by
// Settle for a delivery whose link has ended: the delivery is already back on
// its queue and the outcome changes nothing.
var ErrLinkEnded = errors.New("inproc: the delivery's link has ended; the delivery is back on its queue")

// ErrUnknownDelivery is returned by Settle for a message that is not an
// unsettled delivery of that receiver (already settled, or from another link).
var ErrUnknownDelivery = errors.New("inproc: settle: not an unsettled delivery of this link")

// ---- sender ----

type senderLink struct {
	b    *Broker
	s    *session
	addr address.Address

	t     *topic                // set for a topic address: topics live forever
	q     atomic.Pointer[queue] // last routing lookup for a queue address
	ended atomic.Pointer[error] // why the link ended
}

var _ transport.Sender = (*senderLink)(nil)

func (s *session) NewSender(ctx context.Context, o transport.SenderOptions) (transport.Sender, error) {
	if o.Address.IsZero() {
		return s.newRelay(ctx, o)
	}
	if err := s.check(ctx, o.Address, address.Send); err != nil {
		return nil, err
	}
	l := &senderLink{b: s.c.b, s: s, addr: o.Address}
	if o.Address.Kind() == address.KindTopic {
		l.t = s.c.b.topic(o.Address.Name())
	}
	s.c.b.register(l.addr, l)
	if err := s.add(l); err != nil {
		s.c.b.unregister(l.addr, l)
		return nil, &transport.LinkError{Address: l.addr.String(), Op: "attach", Err: err}
	}
	return l, nil
}

func (l *senderLink) Address() string { return l.addr.Name() }

// receipt is an outcome known when the transfer is stored.
type receipt struct{ o messages.Outcome }

func (r *receipt) Wait(context.Context) (messages.Outcome, error) { return r.o, nil }

// Resolved: the broker decided before Send returned.
func (r *receipt) Resolved() (messages.Outcome, bool) { return r.o, true }

// accepted is shared by every accepted send: no allocation per send.
var accepted transport.Receipt = &receipt{o: messages.Outcome{Kind: messages.Accepted}}

// Send copies m and routes it before it returns, so the outcome is known at
// once: the Receipt is pre-resolved (accepted, or rejected under
// RejectPublish).
func (l *senderLink) Send(ctx context.Context, m *amqp.Message, settled bool) (transport.Receipt, error) {
	if p := l.ended.Load(); p != nil {
		return nil, &transport.LinkError{Address: l.addr.String(), Op: "send", Err: *p}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st, err := own(m)
	if err != nil {
		return nil, err
	}
	if rej := l.b.rejection(l.addr); rej != nil {
		st.release()
		if settled {
			return nil, nil
		}
		return &receipt{o: messages.Outcome{Kind: messages.Rejected, Condition: string(rej.Condition), Description: rej.Description}}, nil
	}
	if l.t != nil {
		l.t.publish(st)
	} else {
		l.b.route(l.addr, st, &l.q)
	}
	st.release()
	if settled {
		return nil, nil
	}
	return accepted, nil
}

func (l *senderLink) Close(context.Context) error {
	l.end(&amqp.LinkError{})
	l.s.forget(l)
	return nil
}

func (l *senderLink) end(cause error) {
	if l.ended.CompareAndSwap(nil, &cause) {
		l.b.unregister(l.addr, l)
		l.s.forget(l)
	}
}

// ---- receiver ----

type receiverLink struct {
	b       *Broker
	s       *session
	id      uint64
	addr    address.Address // what fault hooks match: Raw(node) when dynamic
	name    string          // Address(): the node as attached
	q       *queue
	topic   *topic // set for a topic subscription
	settled bool

	credit   uint64 // guarded by q.mu
	detached bool   // guarded by q.mu; set once, when the link ends

	notifyc chan struct{} // one slot: "buf may have grown"
	done    chan struct{} // closed when the link ends

	// recycle: the user promised not to read a settled delivery
	// (transport.Recycler), so Settle returns its copy to the pool.
	recycle atomic.Bool

	// onActive is told, on a single-active-consumer queue, whether this
	// link is the active consumer (transport.ReceiverOptions.OnActive),
	// as RabbitMQ 4.3 says it with rabbitmq:active. Called under q.mu.
	onActive func(bool)

	mu        sync.Mutex // guards the fields below; nests inside q.mu
	buf       deque      // transferred, not yet received
	unsettled map[*amqp.Message]unsettled
	cause     error
}

// unsettled is a delivery out on a link: its queue entry and the copy the
// receiver got.
type unsettled struct {
	e *entry
	b *box
}

var (
	_ transport.Receiver = (*receiverLink)(nil)
	_ transport.Recycler = (*receiverLink)(nil)
)

// RecycleSettled lets Settle reuse a delivered message's memory; see
// transport.Recycler.
func (r *receiverLink) RecycleSettled() { r.recycle.Store(true) }

func (r *receiverLink) notify() {
	select {
	case r.notifyc <- struct{}{}:
	default:
	}
}

func (s *session) NewReceiver(ctx context.Context, o transport.ReceiverOptions) (transport.Receiver, error) {
	b := s.c.b
	a := o.Address
	if !o.Dynamic {
		if err := s.check(ctx, a, address.Receive); err != nil {
			return nil, err
		}
	} else if err := ctx.Err(); err != nil {
		return nil, err
	}
	if a.IsStream() && !o.Dynamic {
		return s.newStreamReceiver(o)
	}
	r := &receiverLink{
		b:       b,
		s:       s,
		id:      b.ids.Add(1),
		settled: o.Settled,
		notifyc: make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	if !o.Settled {
		r.unsettled = make(map[*amqp.Message]unsettled, max(int(o.Credit), 16))
	}
	switch {
	case o.Dynamic:
		r.q = b.newDynamic()
		r.name = r.q.name
		r.addr = address.Raw(r.q.name)
	case a.Kind() == address.KindTopic && (o.Ephemeral || o.Subscription == ""):
		r.topic = b.topic(a.Name())
		r.q = &queue{id: b.ids.Add(1), name: a.Name() + "::$inproc.sub." + fmt.Sprint(r.id), temporary: true}
		r.q.bind(o.BindingKeys)
		r.name, r.addr = a.Name(), a
	case a.Kind() == address.KindTopic:
		q, err := b.subscription(a.Name(), o.Subscription, o.BindingKeys)
		if err != nil {
			return nil, &transport.LinkError{Address: a.String(), Op: "attach", Err: err}
		}
		r.q = q
		r.name, r.addr = a.Name(), a
	default:
		r.q = b.queue(a.Name(), true)
		if r.q.temporary {
			return nil, &transport.LinkError{Address: a.String(), Op: "attach", Err: &amqp.LinkError{RemoteErr: &amqp.Error{
				Condition:   amqp.ErrCondResourceLocked,
				Description: "a dynamic node is exclusive to the link that created it",
			}}}
		}
		r.name, r.addr = a.Name(), a
	}
	r.onActive = o.OnActive
	r.q.mu.Lock()
	if a.SingleActiveConsumer() {
		r.q.single = true
	}
	r.q.addConsumerLocked(r)
	r.q.mu.Unlock()
	if r.topic != nil {
		r.topic.add(r.q)
	}
	b.register(r.addr, r)
	if err := s.add(r); err != nil {
		r.end(err)
		return nil, &transport.LinkError{Address: r.addr.String(), Op: "attach", Err: err}
	}
	return r, nil
}

func (r *receiverLink) Address() string { return r.name }

// Consumers is the number of receivers attached to the link's queue, this
// one included (transport.ConsumerCounter): on a single-active-consumer
// queue, the active one and those standing by.
func (r *receiverLink) Consumers(context.Context) (int, error) {
	q := r.q
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.cons), nil
}

func (r *receiverLink) linkErr(op string, cause error) error {
	return &transport.LinkError{Address: r.addr.String(), Op: op, Err: cause}
}

// IssueCredit adds n to the link credit and transfers waiting messages.
func (r *receiverLink) IssueCredit(n uint32) error {
	q := r.q
	q.mu.Lock()
	if r.detached {
		q.mu.Unlock()
		r.mu.Lock()
		cause := r.cause
		r.mu.Unlock()
		return r.linkErr("receive", cause)
	}
	r.credit += uint64(n)
	q.credit += uint64(n)
	q.dispatchLocked()
	q.mu.Unlock()
	return nil
}

// testHookReceiveUnlocked, set by a test before any link exists, runs in
// Receive between letting go of the link's lock and copying the message.
var testHookReceiveUnlocked func()

// Receive returns the next transfer, waiting for one until ctx is done or the
// link ends.
func (r *receiverLink) Receive(ctx context.Context) (*amqp.Message, error) {
	for {
		r.mu.Lock()
		if r.buf.len() > 0 {
			return r.popLocked(), nil
		}
		cause := r.cause
		r.mu.Unlock()
		if cause != nil {
			return nil, r.linkErr("receive", cause)
		}
		select {
		case <-r.notifyc:
		case <-r.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Prefetched returns a transfer already on the link, or nil; see
// transport.Prefetcher. Once the link has ended it returns nil: Receive
// reports why.
func (r *receiverLink) Prefetched() *amqp.Message {
	r.mu.Lock()
	if r.buf.len() == 0 || r.cause != nil {
		r.mu.Unlock()
		return nil
	}
	return r.popLocked()
}

// popLocked takes the first transfer off the link's buffer and copies it
// out; r.mu is held, and is unlocked on return.
func (r *receiverLink) popLocked() *amqp.Message {
	e := r.buf.popFront()
	first := !e.delivered
	e.delivered = true
	count, s := e.count, e.msg
	d, pb := s.newBox()
	if !r.settled {
		r.unsettled[&d.msg] = unsettled{e: e, b: d}
		// The copy below holds s: once unlocked, the link may end
		// and e go back, to be accepted on another link.
		s.refs.Add(1)
	}
	r.mu.Unlock()
	if testHookReceiveUnlocked != nil {
		testHookReceiveUnlocked()
	}
	if r.settled {
		r.q.out.Add(-1) // the broker settled it on transfer
	}
	// s is immutable: the copy needs no lock.
	s.deliverInto(d, pb, first, count)
	// The copy's reference, or for a settled link the entry's
	// (e, too, may be s's own: not read from here on).
	s.release()
	return &d.msg
}

var _ transport.Prefetcher = (*receiverLink)(nil)

// Settle applies o to the delivery m. For a settled link it does nothing.
func (r *receiverLink) Settle(ctx context.Context, m *amqp.Message, o messages.Outcome) error {
	if r.settled {
		return nil
	}
	switch o.Kind {
	case messages.Accepted, messages.Rejected, messages.Released, messages.Modified:
	default:
		return fmt.Errorf("inproc: settle: unknown outcome %v", o.Kind)
	}
	r.mu.Lock()
	if r.cause != nil {
		cause := r.cause
		r.mu.Unlock()
		return r.linkErr("settle", fmt.Errorf("%w: %w", ErrLinkEnded, cause))
	}
	u, ok := r.unsettled[m]
	if !ok {
		r.mu.Unlock()
		return ErrUnknownDelivery
	}
	delete(r.unsettled, m)
	r.mu.Unlock()
	e := u.e
	if r.recycle.Load() {
		u.b.recycle()
	}

	q := r.q
	switch o.Kind {
	case messages.Accepted:
		q.out.Add(-1)
		e.msg.release()
	case messages.Rejected:
		q.out.Add(-1)
		q.mu.Lock()
		if !q.deleted {
			q.dead = append(q.dead, deadLetter{e: e, condition: o.Condition, description: o.Description})
		}
		q.mu.Unlock()
	case messages.Released, messages.Modified:
		if o.Kind == messages.Modified {
			if o.DeliveryFailed {
				e.count++
			}
			if o.UndeliverableHere {
				e.excl = append(e.excl, r.id)
			}
		}
		q.mu.Lock()
		q.requeueLocked([]*entry{e})
		q.mu.Unlock()
	}
	return nil
}

// Close detaches the link: unsettled deliveries go back to the head of their
// queue; Receive then reports a *transport.LinkError wrapping an
// *amqp.LinkError with no RemoteErr.
func (r *receiverLink) Close(context.Context) error {
	r.end(&amqp.LinkError{})
	return nil
}

// end detaches the link once, for whatever cause.
func (r *receiverLink) end(cause error) {
	q := r.q
	q.mu.Lock()
	if r.detached {
		q.mu.Unlock()
		return
	}
	r.detached = true
	q.removeConsumerLocked(r)
	r.mu.Lock()
	r.cause = cause
	back := r.buf.drain()
	for _, u := range r.unsettled {
		back = append(back, u.e)
	}
	r.unsettled = nil
	r.mu.Unlock()
	close(r.done)
	if q.temporary {
		q.deleteLocked()
	}
	q.requeueLocked(back)
	q.mu.Unlock()

	if q.temporary {
		if r.topic != nil {
			r.topic.remove(q)
		} else {
			r.b.deleteQueue(q)
		}
	}
	r.b.unregister(r.addr, r)
	r.s.forget(r)
}

func (l *senderLink) session() *session   { return l.s }
func (r *receiverLink) session() *session { return r.s }
func (l *relayLink) session() *session    { return l.s }
