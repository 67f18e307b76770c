package amqp091

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/Azure/go-amqp"
	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// Session is one AMQP 0-9-1 channel. It implements transport.Session.
type Session struct {
	conn   *Conn
	ch     *rmq.Channel
	closes chan *rmq.Error
	done   chan struct{}

	mu  sync.Mutex
	pub *publisher // the channel in confirm mode, once a sender needs it

	acks *chanAcks // orders the acknowledgements of the channel's deliveries

	endMu  sync.Mutex
	endErr error

	// rpc serialises the synchronous methods on the channel, and
	// publishes with them: amqp091-go hands a reply to whichever call
	// waits, so two at once (a consumer cancelled while its successor's
	// basic.qos is under way) could each take the other's reply.
	rpc sync.Mutex
}

// call runs f, a synchronous method on the channel, one at a time and
// bounded by ctx (see Conn.call).
func (s *Session) call(ctx context.Context, f func() error) error {
	return s.conn.call(ctx, s.ch, func() error {
		s.rpc.Lock()
		defer s.rpc.Unlock()
		return f()
	})
}

var _ transport.Session = (*Session)(nil)

func newSession(c *Conn, ch *rmq.Channel) *Session {
	s := &Session{conn: c, ch: ch, closes: ch.NotifyClose(make(chan *rmq.Error, 1)), done: make(chan struct{})}
	s.acks = newChanAcks(s)
	go s.watch()
	return s
}

// watch records why the channel ended (amqp091-go hands the broker's
// reason over before it closes the channel's consumers and listeners) and
// closes done.
func (s *Session) watch() {
	e, ok := <-s.closes
	s.endMu.Lock()
	switch {
	case ok && e != nil:
		s.endErr = s.conn.gone(e)
		if e.Code == rmq.NotFound {
			// Something declared is gone: the next attach declares again.
			s.conn.declared.Clear()
		}
	case s.conn.conn.IsClosed():
		s.endErr = lost(errors.New("the connection is closed"), true)
	default:
		s.endErr = &amqp.SessionError{}
	}
	s.endMu.Unlock()
	close(s.done)
}

// ended is the error for a channel that is closed: the broker's reason
// when it closed it, the connection's loss when that ended first.
func (s *Session) ended() error {
	t := time.NewTimer(DefaultCloseTimeout)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		// Not reached: amqp091-go closes the listener with the channel.
		return &amqp.SessionError{}
	}
	s.endMu.Lock()
	defer s.endMu.Unlock()
	return s.endErr
}

// failed is the error of a call on the channel that failed.
func (s *Session) failed(err error) error {
	if s.ch.IsClosed() {
		return s.ended()
	}
	return s.conn.gone(err)
}

// closedCh is closed once the channel has ended.
func (s *Session) closedCh() <-chan struct{} { return s.done }

// Close closes the channel, bounded by ctx. What its consumer held and
// did not acknowledge goes back to its queue, marked redelivered.
func (s *Session) Close(ctx context.Context) error {
	ctx, cancel := closeContext(ctx)
	defer cancel()
	err := s.call(ctx, s.ch.Close)
	if err != nil && !errors.Is(err, rmq.ErrClosed) && !s.ch.IsClosed() {
		return fmt.Errorf("amqpactor: close channel on %s: %w", s.conn.c.redacted, err)
	}
	return nil
}

// publisher puts the channel in confirm mode (once).
func (s *Session) publisher(ctx context.Context) (*publisher, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pub != nil {
		return s.pub, nil
	}
	p := &publisher{s: s, pending: map[uint64]*pending{}}
	// Unbuffered on purpose: one goroutine reads both, and amqp091-go
	// hands a basic.return over before it reads the basic.ack that
	// follows it, so a return is always recorded before its confirm.
	confirms := s.ch.NotifyPublish(make(chan rmq.Confirmation))
	returns := s.ch.NotifyReturn(make(chan rmq.Return))
	if err := s.call(ctx, func() error { return s.ch.Confirm(false) }); err != nil {
		return nil, err
	}
	go p.run(confirms, returns)
	s.pub = p
	return p, nil
}

// NewSender declares what a needs and returns a sender on this channel.
// Every sender of a session shares the channel and its confirms.
func (s *Session) NewSender(ctx context.Context, o transport.SenderOptions) (transport.Sender, error) {
	if o.Address.IsZero() {
		return nil, &transport.LinkError{Address: "(anonymous)", Op: "attach",
			Err: fmt.Errorf("%w: no anonymous relay on AMQP 0-9-1", transport.ErrNotSupported)}
	}
	r, err := sendRoute(o.Address)
	if err != nil {
		return nil, err
	}
	if err := s.conn.declareForSend(ctx, o.Address, r); err != nil {
		return nil, err
	}
	p, err := s.publisher(ctx)
	if err != nil {
		return nil, linkError(ctx, o.Address.String(), "attach", err)
	}
	return &Sender{s: s, p: p, route: r, addr: o.Address.String()}, nil
}

// Sender publishes to one address. It implements transport.Sender.
type Sender struct {
	s     *Session
	p     *publisher
	route route
	addr  string

	mu     sync.Mutex
	closed bool
}

var _ transport.Sender = (*Sender)(nil)

// Address is the address as given.
func (s *Sender) Address() string { return s.addr }

// Send publishes m, mandatory. The Receipt yields the broker's confirm:
// accepted on basic.ack, rejected on basic.nack, released with the
// reply code on a basic.return (no queue took it). A settled send
// returns no Receipt; the confirm is then ignored.
func (s *Sender) Send(ctx context.Context, m *amqp.Message, settled bool) (transport.Receipt, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, &transport.LinkError{Address: s.addr, Op: "send", Err: &amqp.LinkError{}}
	}
	p := s.p
	pub, err := toPublishing(m)
	if err != nil {
		return nil, &transport.LinkError{Address: s.addr, Op: "send", Err: err}
	}
	if via := s.s.conn.replyChannel(pub.ReplyTo); via != nil {
		// A request: direct reply-to wants it published on the channel
		// that consumes the replies.
		if p, err = via.publisher(ctx); err != nil {
			return nil, linkError(ctx, s.addr, "send", err)
		}
		pub.ReplyTo = DirectReplyTo
	}
	r, err := s.route.forMessage(m)
	if err != nil {
		return nil, &transport.LinkError{Address: s.addr, Op: "send", Err: err}
	}
	rc, err := p.publish(ctx, r, pub, !settled)
	if err != nil {
		return nil, linkError(ctx, s.addr, "send", err)
	}
	if settled {
		return nil, nil
	}
	rc.addr = s.addr
	return rc, nil
}

// Close forgets the sender; the channel stays for the session's others.
func (s *Sender) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

// publisher is a channel in confirm mode: publishes are pipelined, each
// waiting for its confirm in its own receipt.
type publisher struct {
	s     *Session
	pubMu sync.Mutex // orders sequence numbers with publishes

	// mu is never held across a call into amqp091-go: run takes it while
	// amqp091-go's reader waits for run.
	mu      sync.Mutex
	pending map[uint64]*pending
	err     error // once the channel has ended
}

type pending struct {
	route     route
	messageID string
	r         *receipt // nil for a settled publish
	returned  *rmq.Return
}

// tracked is a publish and its receipt in one allocation.
type tracked struct {
	pending
	receipt
}

func (p *publisher) publish(ctx context.Context, r route, pub rmq.Publishing, track bool) (*receipt, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var rc *receipt
	var e *pending
	if track {
		t := &tracked{pending: pending{route: r, messageID: pub.MessageId}, receipt: receipt{done: make(chan struct{})}}
		rc, e = &t.receipt, &t.pending
		e.r = rc
	} else {
		e = &pending{route: r, messageID: pub.MessageId}
	}
	p.pubMu.Lock()
	defer p.pubMu.Unlock()
	// Not under p.mu: amqp091-go's reader holds its confirms lock while it
	// hands a confirm to run, which takes p.mu; holding p.mu here while
	// asking for that lock would stall both until amqp091-go drops the
	// confirm (after 5 s) and its publish never learnt its outcome.
	seq := p.s.ch.GetNextPublishSeqNo()
	p.mu.Lock()
	if p.err != nil {
		err := p.err
		p.mu.Unlock()
		return nil, err
	}
	p.pending[seq] = e
	p.mu.Unlock()
	// amqp091-go writes a publish frame by frame; a method another
	// goroutine sends on the same channel meanwhile (the direct reply-to
	// consumer's basic.cancel) would land inside it.
	p.s.rpc.Lock()
	err := p.s.ch.PublishWithContext(ctx, r.exchange, r.key, true, false, pub)
	p.s.rpc.Unlock()
	if err != nil {
		p.mu.Lock()
		delete(p.pending, seq)
		p.mu.Unlock()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if p.s.ch.IsClosed() {
			return nil, p.s.ended()
		}
		return nil, err
	}
	return rc, nil
}

// run resolves receipts from the broker's confirms and returns, until the
// channel ends; then every receipt still waiting fails with the channel's
// end, which the sender actor takes as a lost link and sends again.
func (p *publisher) run(confirms <-chan rmq.Confirmation, returns <-chan rmq.Return) {
	for confirms != nil || returns != nil {
		select {
		case c, ok := <-confirms:
			if !ok {
				confirms = nil
				continue
			}
			p.confirm(c)
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			p.returned(r)
		}
	}
	err := p.s.ended()
	p.mu.Lock()
	p.err = err
	left := p.pending
	p.pending = map[uint64]*pending{}
	p.mu.Unlock()
	for _, e := range left {
		if e.r != nil {
			e.r.resolve(messages.Outcome{}, err)
		}
	}
}

func (p *publisher) confirm(c rmq.Confirmation) {
	p.mu.Lock()
	e, ok := p.pending[c.DeliveryTag]
	delete(p.pending, c.DeliveryTag)
	p.mu.Unlock()
	if !ok || e.r == nil {
		return
	}
	switch {
	case e.returned != nil:
		e.r.resolve(messages.Outcome{Kind: messages.Released, Condition: string(amqp.ErrCondNotFound),
			Description: fmt.Sprintf("unroutable: the broker returned it (%d %s) from exchange %q with routing key %q",
				e.returned.ReplyCode, e.returned.ReplyText, e.returned.Exchange, e.returned.RoutingKey)}, nil)
	case c.Ack:
		e.r.resolve(messages.Outcome{Kind: messages.Accepted}, nil)
	default:
		e.r.resolve(messages.Outcome{Kind: messages.Rejected, Condition: string(amqp.ErrCondInternalError),
			Description: "the broker refused the message (basic.nack)"}, nil)
	}
}

// returned marks the publish a basic.return is for: the earliest
// unconfirmed one to the same exchange and routing key with the same
// message-id. The return carries no sequence number; these three tell
// publishes apart unless a message is sent twice in a row to one place,
// when either is the one returned.
func (p *publisher) returned(r rmq.Return) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best uint64
	for seq, e := range p.pending {
		if e.returned == nil && e.route.exchange == r.Exchange && e.route.key == r.RoutingKey && e.messageID == r.MessageId &&
			(best == 0 || seq < best) {
			best = seq
		}
	}
	if best != 0 {
		ret := r
		p.pending[best].returned = &ret
	}
}

// receipt is the transport.Receipt of one publish.
type receipt struct {
	addr string
	done chan struct{}
	o    messages.Outcome
	err  error
}

func (r *receipt) resolve(o messages.Outcome, err error) {
	r.o, r.err = o, err
	close(r.done)
}

// Wait blocks for the broker's confirm.
func (r *receipt) Wait(ctx context.Context) (messages.Outcome, error) {
	select {
	case <-r.done:
		if r.err != nil {
			return messages.Outcome{}, &transport.LinkError{Address: r.addr, Op: "send", Err: r.err}
		}
		return r.o, nil
	case <-ctx.Done():
		return messages.Outcome{}, fmt.Errorf("amqpactor: send %s: %w", r.addr, ctx.Err())
	}
}
