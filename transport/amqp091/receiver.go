package amqp091

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/Azure/go-amqp"
	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// ErrCreditWindow is wrapped by the error IssueCredit returns when a grant
// would leave more credit outstanding than ReceiverOptions.Credit.
var ErrCreditWindow = transport.ErrCreditWindow

// defaultPrefetch is the window of a receiver that gives none.
const defaultPrefetch = 256

// NewReceiver declares the queue of o (or takes direct reply-to when
// o.Dynamic) and sets the channel's prefetch to o.Credit with basic.qos.
// The consumer starts on the first IssueCredit, so a receiver that grants
// nothing receives nothing.
func (s *Session) NewReceiver(ctx context.Context, o transport.ReceiverOptions) (transport.Receiver, error) {
	window := o.Credit
	if window == 0 {
		window = defaultPrefetch
	}
	r := &Receiver{s: s, window: window, settled: o.Settled, held: map[*amqp.Message]uint64{},
		credit: make(chan struct{}, 1), started: make(chan struct{}), maxSize: s.conn.c.cfg.MaxMessageSize}
	if r.maxSize == 0 {
		r.maxSize = DefaultMaxMessageSize
	}
	if o.Dynamic {
		// Direct reply-to: no queue; replies arrive pre-settled.
		r.queue, r.autoAck, r.settled = DirectReplyTo, true, true
		r.addr = DirectReplyTo + "#" + randomToken()
		r.consuming = true
		if err := r.consume(ctx); err != nil {
			return nil, linkError(ctx, "(dynamic)", "attach", err)
		}
		s.conn.replies.Store(r.addr, s)
		return r, nil
	}
	q, quorum, err := s.conn.receiveQueue(ctx, o)
	if err != nil {
		return nil, err
	}
	r.queue, r.addr, r.sac, r.quorum = q, o.Address.String(), o.Address.SingleActiveConsumer(), quorum
	if !o.Settled {
		ch := s.ch
		r.acks = newAcker(s.acks, func(tag uint64, multiple bool) error { return ch.Ack(tag, multiple) })
		go r.acks.run(s.done)
	}
	// Per consumer: the window of this receiver only. A pre-settled
	// receiver has one too: it acknowledges each delivery as Receive hands
	// it out, so the broker never sends more than the window ahead
	// (automatic acknowledgement would let it send the whole queue).
	if err := s.call(ctx, func() error { return s.ch.Qos(int(min(window, 65535)), 0, false) }); err != nil {
		return nil, linkError(ctx, r.addr, "attach", err)
	}
	return r, nil
}

// replyChannel is the session whose channel consumes the replies to
// replyTo, when replyTo is a direct reply-to address of this connection.
func (c *Conn) replyChannel(replyTo string) *Session {
	if replyTo == "" {
		return nil
	}
	if s, ok := c.replies.Load(replyTo); ok {
		if s := s.(*Session); !s.ch.IsClosed() {
			return s
		}
		// Its channel is gone: the request goes out as it is, and its
		// caller waits out its context, as for a lost reply link on 1.0.
		c.replies.Delete(replyTo)
	}
	return nil
}

// Receiver is one consumer on its session's channel. It implements
// transport.Receiver. Credit maps onto the prefetch window: the broker
// holds back what is over it, and Receive hands out no more than has been
// granted.
type Receiver struct {
	s       *Session
	queue   string
	addr    string
	window  uint32
	autoAck bool   // direct reply-to only
	sac     bool   // a single-active-consumer queue
	quorum  bool   // a quorum queue: x-delivery-count is the broker's on a redelivery
	acks    *acker // nil when settled
	settled bool   // at-most-once: acknowledged when handed out
	maxSize uint64

	mu         sync.Mutex
	deliveries <-chan rmq.Delivery
	tag        string
	issued     uint64
	received   uint64
	held       map[*amqp.Message]uint64
	closing    bool
	credit     chan struct{} // signalled by IssueCredit
	consuming  bool          // basic.consume sent (or under way)
	started    chan struct{} // closed once basic.consume is answered
	consumeErr error
	stopped    atomic.Bool // the runtime stopped taking deliveries
	deferred   []uint64    // released or modified after it stopped
}

var _ transport.Receiver = (*Receiver)(nil)

// ReplyNode is "direct-reply-to" for a Dynamic receiver (0-9-1's replies
// always come by direct reply-to), empty otherwise.
func (r *Receiver) ReplyNode() string {
	if r.queue == DirectReplyTo {
		return "direct-reply-to"
	}
	return ""
}

// Consumers reads the consumer count of the receiver's queue with a passive
// declare on a channel of its own (transport.ConsumerCounter). RabbitMQ
// counts a consumer once it consumes (after the first IssueCredit), and of a
// single-active-consumer queue only the active one.
func (r *Receiver) Consumers(ctx context.Context) (int, error) {
	if r.queue == "" || r.queue == DirectReplyTo {
		return 0, fmt.Errorf("amqpactor: consumer count of %s: %w", r.addr, transport.ErrNotSupported)
	}
	var n int
	err := r.s.conn.declare(ctx, func(ch *rmq.Channel) error {
		q, err := ch.QueueDeclarePassive(r.queue, false, false, false, false, nil)
		n = q.Consumers
		return err
	})
	return n, err
}

// Address is the address as given (a direct reply-to address when
// Dynamic: a request naming it as reply-to is published on this
// receiver's channel, as direct reply-to needs).
func (r *Receiver) Address() string { return r.addr }

func (r *Receiver) consume(ctx context.Context) error {
	tag := "amqpactor-" + randomToken()
	var d <-chan rmq.Delivery
	err := r.s.call(ctx, func() error {
		var err error
		d, err = r.s.ch.Consume(r.queue, tag, r.autoAck, false, false, false, nil)
		return err
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.consumeErr = err
	} else {
		r.tag, r.deliveries = tag, d
	}
	close(r.started)
	return err
}

// IssueCredit adds n to the credit. The first grant starts the consumer.
// A grant that would leave more outstanding than the window is refused
// with an error wrapping ErrCreditWindow.
func (r *Receiver) IssueCredit(n uint32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	window := r.window
	if r.autoAck {
		window = 0 // the broker pushes direct replies whatever the credit
	}
	if err := transport.CheckGrant(r.addr, r.closing, &amqp.LinkError{}, n, r.issued-r.received, window); err != nil || n == 0 {
		return err
	}
	if r.consumeErr != nil {
		return &transport.LinkError{Address: r.addr, Op: "receive", Err: r.consumeErr}
	}
	if !r.consuming {
		// basic.consume waits for the broker; the caller may be an
		// actor's Receive, so it goes off on its own, and Receive waits.
		r.consuming = true
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), DefaultDialTimeout)
			defer cancel()
			_ = r.consume(ctx)
		}()
	}
	r.issued += uint64(n)
	select {
	case r.credit <- struct{}{}:
	default:
	}
	return nil
}

// Receive blocks for the next delivery there is credit for.
func (r *Receiver) Receive(ctx context.Context) (*amqp.Message, error) {
	select {
	case <-r.started:
	case <-ctx.Done():
		return nil, r.stopTaking(ctx)
	case <-r.s.closedCh():
		return nil, &transport.LinkError{Address: r.addr, Op: "receive", Err: r.s.ended()}
	}
	for {
		r.mu.Lock()
		d, ok, cerr := r.deliveries, r.issued > r.received, r.consumeErr
		r.mu.Unlock()
		if cerr != nil {
			return nil, &transport.LinkError{Address: r.addr, Op: "receive", Err: cerr}
		}
		if !ok || d == nil {
			select {
			case <-r.credit:
				continue
			case <-ctx.Done():
				return nil, r.stopTaking(ctx)
			case <-r.s.closedCh():
				return nil, &transport.LinkError{Address: r.addr, Op: "receive", Err: r.s.ended()}
			}
		}
		select {
		case del, ok := <-d:
			if !ok {
				return nil, &transport.LinkError{Address: r.addr, Op: "receive", Err: r.consumerEnded()}
			}
			return r.take(&del), nil
		case <-ctx.Done():
			return nil, r.stopTaking(ctx)
		}
	}
}

// stopTaking notes that the runtime has stopped taking deliveries from this
// receiver (its pump's context ended: a drain, or the link's end) and
// returns the context's error.
func (r *Receiver) stopTaking(ctx context.Context) error {
	r.stopped.Store(true)
	return fmt.Errorf("amqpactor: receive %s: %w", r.addr, ctx.Err())
}

// consumerEnded says why the deliveries stopped: the channel ended (amqp091-go
// marks it closed before it closes its consumers), the receiver was closed,
// or the broker cancelled the consumer (its queue was deleted), which ends
// this link only.
func (r *Receiver) consumerEnded() error {
	if r.s.ch.IsClosed() {
		return r.s.ended()
	}
	r.mu.Lock()
	closing := r.closing
	r.mu.Unlock()
	if closing {
		return &amqp.LinkError{}
	}
	r.s.conn.declared.Clear() // its queue is gone, most likely
	return &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondResourceDeleted,
		Description: "the broker cancelled the consumer of queue " + r.queue}}
}

func (r *Receiver) take(d *rmq.Delivery) *amqp.Message {
	var m *amqp.Message
	if reason, ok := poisonMark(d.Headers); ok {
		m = poison(reason)
	} else if uint64(len(d.Body)) > r.maxSize {
		m = poison(fmt.Sprintf("the message is %d bytes, over the max message size of %d", len(d.Body), r.maxSize))
	} else {
		m = fromDelivery(d, r.quorum)
	}
	r.mu.Lock()
	r.received++
	closing := r.closing
	if !r.settled && !closing {
		r.held[m] = d.DeliveryTag
	}
	r.mu.Unlock()
	if closing && !r.settled {
		// Taken as the receiver closes: nobody will settle it.
		_ = r.s.acks.do(func() error { return r.s.ch.Nack(d.DeliveryTag, false, true) })
	}
	if r.settled && !r.autoAck {
		// Settled on arrival, as a pre-settled AMQP 1.0 transfer is: a
		// failure here is the channel's end, which the next Receive
		// reports.
		_ = r.s.ch.Ack(d.DeliveryTag, false)
	}
	return m
}

// Settle acknowledges m: accepted is basic.ack, rejected basic.nack
// without requeue (the queue dead-letters or drops it), modified
// basic.reject with requeue (a quorum queue counts it in x-delivery-count)
// and released basic.nack with requeue (counted on RabbitMQ 4.0 only);
// modified{undeliverable-here} is not requeued, as RabbitMQ 4 does over
// AMQP 1.0 (settleFrame). A pre-settled message needs nothing.
func (r *Receiver) Settle(ctx context.Context, m *amqp.Message, o messages.Outcome) error {
	if m == nil {
		return errors.New("amqpactor: settle: nil message")
	}
	if r.settled {
		return nil
	}
	requeue := o.Kind == messages.Released || (o.Kind == messages.Modified && !o.UndeliverableHere)
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		// Close has given back what this receiver held.
		return &transport.LinkError{Address: r.addr, Op: "receive", Err: &amqp.LinkError{}}
	}
	tag, ok := r.held[m]
	delete(r.held, m)
	deferred := ok && requeue && r.stopped.Load()
	if deferred {
		// The runtime takes nothing more from this consumer and will close
		// it: Close gives the message back, in order, once the consumer is
		// gone (or the channel's close does, in its place in the queue). A
		// basic.nack now would have the broker hand it straight back to
		// this consumer, behind what followed it (an order inversion for a
		// single-active-consumer queue, seen when a replica stops).
		r.deferred = append(r.deferred, tag)
		r.acks.holdBack(tag, o)
	}
	r.mu.Unlock()
	if !ok {
		return &transport.LinkError{Address: r.addr, Op: "receive",
			Err: errors.New("settle a message that this receiver does not hold")}
	}
	if deferred {
		return nil
	}
	var err error
	switch o.Kind {
	case messages.Accepted:
		// Sent by the acker, with others where it can (acks.go).
		r.acks.ack(tag)
	case messages.Rejected, messages.Released, messages.Modified:
		err = r.acks.nack(tag, func() error { return settleFrame(r.s.ch, tag, o) })
	default:
		return fmt.Errorf("amqpactor: settle on %s: unknown outcome kind %d", r.addr, o.Kind)
	}
	if err != nil {
		return &transport.LinkError{Address: r.addr, Op: "receive", Err: r.s.failed(err)}
	}
	return nil
}

// Close ends the consumer and gives back what it holds. RabbitMQ 4.0 can
// lose the last acknowledgements before a channel's close (their messages
// come back: duplicates), which basic.cancel, answered only once the queue
// has them, prevents; so Close sends what is acknowledged, cancels, and
// then gives back in delivery order what the consumer still holds
// (giveBack). On a single-active-consumer queue (a partition) cancelling
// first would let the next consumer take what follows the held messages
// before them, so there Close closes the channel at once, which returns
// each message in its place: order kept, duplicates possible (at least
// once). Settle fails once Close has begun. The direct reply-to consumer
// is only cancelled.
func (r *Receiver) Close(ctx context.Context) error {
	ctx, cancel := closeContext(ctx)
	defer cancel()
	r.mu.Lock()
	first := !r.closing
	r.closing = true
	consuming := r.consuming
	r.mu.Unlock()
	r.s.conn.replies.Delete(r.addr)
	if r.acks != nil && first {
		// What the runtime acknowledged goes out before the consumer ends.
		_ = r.acks.flush()
		r.acks.stop()
	}
	if !first || r.s.ch.IsClosed() {
		return nil
	}
	if r.sac {
		if err := r.s.call(ctx, r.s.ch.Close); err != nil && !r.s.ch.IsClosed() {
			return linkError(ctx, r.addr, "detach", err)
		}
		return nil
	}
	if consuming {
		select {
		case <-r.started:
		case <-ctx.Done():
			return nil // the channel's close ends the consumer
		}
	}
	r.mu.Lock()
	tag, started := r.tag, r.deliveries != nil
	r.mu.Unlock()
	if !started {
		return nil
	}
	if err := r.s.call(ctx, func() error { return r.s.ch.Cancel(tag, false) }); err != nil && !r.s.ch.IsClosed() {
		return linkError(ctx, r.addr, "detach", err)
	}
	if !r.autoAck {
		r.giveBack(ctx)
	}
	return nil
}

// giveBack returns to the queue, in delivery order, what the cancelled
// consumer still holds: deliveries the runtime never took (amqp091-go
// hands them over after the cancel), taken and never settled (a link that
// ended under its handlers), and those released while it stopped. With
// the consumer gone the broker cannot hand them back to it, and the
// session, which may get a new consumer, keeps nothing unacknowledged.
func (r *Receiver) giveBack(ctx context.Context) {
	var tags []uint64
	r.mu.Lock()
	d := r.deliveries
	r.mu.Unlock()
	for d != nil {
		select {
		case del, ok := <-d:
			if !ok {
				d = nil
				continue
			}
			tags = append(tags, del.DeliveryTag)
		case <-ctx.Done():
			d = nil
		case <-r.s.closedCh():
			return // the channel's end gave everything back
		}
	}
	r.mu.Lock()
	for _, tag := range r.held {
		tags = append(tags, tag)
	}
	tags = append(tags, r.deferred...)
	r.held, r.deferred = map[*amqp.Message]uint64{}, nil
	r.mu.Unlock()
	slices.Sort(tags)
	_ = r.s.acks.do(func() error {
		for _, tag := range tags {
			if err := r.acks.giveBackFrame(r.s.ch, tag); err != nil {
				return err // the channel has ended, which gives them back
			}
		}
		return nil
	})
}
