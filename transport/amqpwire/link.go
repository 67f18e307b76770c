package amqpwire

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// ErrCreditWindow is wrapped by the error IssueCredit returns when a grant
// would leave more credit outstanding than ReceiverOptions.Credit.
var ErrCreditWindow = transport.ErrCreditWindow

// errClosed is wrapped when a link is used after its Close began.
var errClosed = errors.New("link closed")

// drainTimeout bounds the drain Receiver.Close does before detaching.
const drainTimeout = time.Second

// Session is one AMQP session. It implements transport.Session.
type Session struct {
	conn *Conn
	s    *amqp.Session
}

var _ transport.Session = (*Session)(nil)

// Close ends the session, bounded by ctx (DefaultCloseTimeout when it has no
// deadline). A session the broker ended for a frame on a link already
// detached counts as ended: go-amqp can send a flow after a receiver's detach
// (go-amqp issue 367), and RabbitMQ 4.3 ends the session for it, but the
// closer had detached its links and wanted the session gone.
func (s *Session) Close(ctx context.Context) error {
	ctx, cancel := closeContext(ctx)
	defer cancel()
	err := s.s.Close(ctx)
	if err == nil {
		return nil
	}
	var se *amqp.SessionError
	if errors.As(err, &se) && se.RemoteErr != nil {
		s.conn.remoteEnd.Store(time.Now().UnixNano()) // see awaitChannelReuse
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Condition == amqp.ErrCondUnattachedHandle {
		s.conn.log.Debug("amqpactor: the broker ended a closing session for a frame on a detached link",
			"description", ae.Description)
		return nil
	}
	return fmt.Errorf("amqpactor: end session on %s: %w", s.conn.url, describe(err))
}

// linkError wraps err for the address. A context error is returned as
// itself (wrapped with the address), not as a *transport.LinkError: the
// caller gave up, the link did not fail.
func linkError(ctx context.Context, addr, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctx != nil && ctx.Err() != nil {
		if errors.Is(err, ctx.Err()) {
			return fmt.Errorf("amqpactor: %s %s: %w", op, addr, err)
		}
		// go-amqp reports a send that found no credit before the deadline
		// as amqp:link:transfer-limit-exceeded; keep both.
		return fmt.Errorf("amqpactor: %s %s: %w: %w", op, addr, ctx.Err(), describe(err))
	}
	return &transport.LinkError{Address: addr, Op: op, Err: describe(err)}
}

// NewSender declares what the dialect needs (RabbitMQ4) and attaches a
// sender to o.Address.
//
// A zero o.Address attaches to the anonymous terminus instead (the peer
// must offer ANONYMOUS-RELAY, see Features): the Sender is a *Relay.
func (s *Session) NewSender(ctx context.Context, o transport.SenderOptions) (transport.Sender, error) {
	// Mixed: each transfer says whether it is settled.
	mode := amqp.SenderSettleModeMixed
	if o.Address.IsZero() {
		return s.newRelay(ctx, mode)
	}
	node, err := address.Render(s.conn.dialect, o.Address, address.Send, "")
	if err == nil {
		err = address.CheckStream(s.conn.dialect, o.Address)
	}
	if err != nil {
		return nil, err
	}
	if s.conn.dialect == address.RabbitMQ4 {
		if err := s.conn.declareForSend(ctx, o.Address); err != nil {
			return nil, err
		}
	}
	if node.Exclusive {
		if err := s.conn.ensureExclusive(ctx, o.Address); err != nil {
			return nil, err
		}
	}
	if s.conn.dialect == address.RabbitMQ4 && o.Address.Kind() == address.KindTopic && s.conn.anonymousRelay() {
		// RabbitMQ 4 routes what a link to /exchanges/NAME carries with
		// the empty routing key; a topic routes by each message's subject,
		// which only a per-message address can carry.
		snd, err := s.s.NewSender(ctx, "", &amqp.SenderOptions{SettlementMode: &mode})
		if err != nil {
			return nil, s.conn.linkError(ctx, node.Address, "attach", err)
		}
		return &subjectSender{Sender{s: snd, addr: node.Address, conn: s.conn}}, nil
	}
	snd, err := s.s.NewSender(ctx, node.Address, &amqp.SenderOptions{
		TargetCapabilities: node.Capabilities,
		SettlementMode:     &mode,
	})
	if err != nil {
		return nil, s.conn.linkError(ctx, node.Address, "attach", err)
	}
	return &Sender{s: snd, addr: node.Address, conn: s.conn}, nil
}

// Sender is a sender link. It implements transport.Sender.
type Sender struct {
	s    *amqp.Sender
	addr string
	conn *Conn
}

var _ transport.Sender = (*Sender)(nil)

// Address is the target as attached.
func (s *Sender) Address() string { return s.addr }

// Send writes m. A settled transfer returns a nil Receipt once written.
// Otherwise the Receipt yields the broker's outcome; Send does
// not wait for it.
func (s *Sender) Send(ctx context.Context, m *amqp.Message, settled bool) (transport.Receipt, error) {
	if settled {
		if err := s.s.Send(ctx, m, &amqp.SendOptions{Settled: true}); err != nil {
			return nil, s.conn.linkError(ctx, s.addr, "send", err)
		}
		return nil, nil
	}
	r, err := s.s.SendWithReceipt(ctx, m, nil)
	if err != nil {
		return nil, s.conn.linkError(ctx, s.addr, "send", err)
	}
	return newReceipt(r, s.addr), nil
}

// Close detaches the link, bounded by ctx (DefaultCloseTimeout when it has no
// deadline).
func (s *Sender) Close(ctx context.Context) error {
	ctx, cancel := closeContext(ctx)
	defer cancel()
	return linkError(ctx, s.addr, "detach", nodeGone(s.s.Close(ctx)))
}

// receipt is the transport.Receipt of one unsettled transfer. It is a
// transport.ReusableReceipt: one receipt per publish was an allocation raw
// go-amqp does not make.
type receipt struct {
	mu   sync.Mutex
	r    amqp.SendReceipt
	addr string
}

var receipts = sync.Pool{New: func() any { return new(receipt) }}

func newReceipt(r amqp.SendReceipt, addr string) *receipt {
	rc := receipts.Get().(*receipt)
	rc.r, rc.addr = r, addr
	return rc
}

// Recycle puts r back for another transfer. go-amqp keeps no reference to
// it, so even a receipt whose outcome never came may be reused.
func (r *receipt) Recycle() {
	r.mu.Lock()
	r.r, r.addr = amqp.SendReceipt{}, ""
	r.mu.Unlock()
	receipts.Put(r)
}

// Wait blocks for the broker's outcome.
func (r *receipt) Wait(ctx context.Context) (messages.Outcome, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	state, err := r.r.Wait(ctx)
	if err != nil {
		return messages.Outcome{}, linkError(ctx, r.addr, "send", err)
	}
	o, err := outcomeOf(state)
	if err != nil {
		return messages.Outcome{}, &transport.LinkError{Address: r.addr, Op: "send", Err: err}
	}
	return o, nil
}

// outcomeOf maps a terminal delivery state to an Outcome.
func outcomeOf(state amqp.DeliveryState) (messages.Outcome, error) {
	switch st := state.(type) {
	case *amqp.StateAccepted:
		return messages.Outcome{Kind: messages.Accepted}, nil
	case *amqp.StateRejected:
		o := messages.Outcome{Kind: messages.Rejected}
		if st.Error != nil {
			o.Condition = string(st.Error.Condition)
			o.Description = st.Error.Description
			o.Info = st.Error.Info
		}
		return o, nil
	case *amqp.StateReleased:
		return messages.Outcome{Kind: messages.Released}, nil
	case *amqp.StateModified:
		return messages.Outcome{Kind: messages.Modified,
			DeliveryFailed: st.DeliveryFailed, UndeliverableHere: st.UndeliverableHere}, nil
	}
	return messages.Outcome{}, fmt.Errorf("the broker settled the transfer with a non-terminal state %T", state)
}

// NewReceiver declares what the dialect needs (RabbitMQ4) and attaches a
// receiver with manual credit: nothing arrives before IssueCredit.
func (s *Session) NewReceiver(ctx context.Context, o transport.ReceiverOptions) (transport.Receiver, error) {
	d := s.conn.dialect
	opts := &amqp.ReceiverOptions{
		// No max-message-size on the link: go-amqp would end the link
		// for a larger message, handing every message in flight back to
		// the broker. The connection's guard enforces
		// Config.MaxMessageSize instead, one delivery at a time.
		Credit: -1,
	}
	if o.Settled {
		ssm := amqp.SenderSettleModeSettled
		opts.RequestedSenderSettleMode = &ssm
	} else {
		ssm := amqp.SenderSettleModeUnsettled
		rsm := amqp.ReceiverSettleModeFirst
		opts.RequestedSenderSettleMode = &ssm
		opts.SettlementMode = &rsm
	}

	var source, replyNode string
	if o.Dynamic {
		replyNode = "dynamic"
	}
	switch {
	case o.Dynamic && d == address.RabbitMQ4:
		replyNode = s.conn.ReplyNode()
		switch replyNode {
		case ReplyDirect:
			// Direct reply-to: no queue at all; replies come pre-settled.
			opts.DynamicAddress = true
			opts.SourceCapabilities = []string{"rabbitmq:volatile-queue"}
			opts.SourceExpiryPolicy = amqp.ExpiryPolicyLinkDetach
			ssm := amqp.SenderSettleModeSettled
			opts.RequestedSenderSettleMode = &ssm
		case ReplyTemporaryQueue:
			opts.DynamicAddress = true
			opts.SourceCapabilities = []string{"temporary-queue"}
		default:
			q, err := s.conn.declareReplyQueue(ctx)
			if err != nil {
				return nil, err
			}
			source = q
		}
	case o.Dynamic:
		opts.DynamicAddress = true
	default:
		node, err := address.Render(d, o.Address, address.Receive, o.Subscription)
		if o.Ephemeral {
			node, err = address.RenderEphemeral(d, o.Address, o.Subscription)
		}
		if err == nil {
			err = address.CheckBindingKeys(d, o.Address, o.BindingKeys)
		}
		if err == nil {
			err = address.CheckStream(d, o.Address)
		}
		if err != nil {
			return nil, err
		}
		if node.Durable {
			// The source is the broker's node; go-amqp's Durability and
			// ExpiryPolicy would set our own target's instead.
			opts.SourceDurability = amqp.DurabilityUnsettledState
			opts.SourceExpiryPolicy = amqp.ExpiryPolicyNever
		}
		if node.LinkName != "" {
			opts.Name = node.LinkName
		}
		if d == address.RabbitMQ4 {
			if err := s.conn.checkDelayedRetry(o); err != nil {
				return nil, err
			}
			if err := s.conn.checkStreamSQL(o); err != nil {
				return nil, err
			}
			if err := s.conn.declareForReceive(ctx, o, node); err != nil {
				return nil, err
			}
		}
		if node.Exclusive {
			if err := s.conn.ensureExclusive(ctx, o.Address); err != nil {
				return nil, err
			}
		}
		source = node.Address
		opts.SourceCapabilities = node.Capabilities
		if o.Address.IsStream() {
			opts.Filters = streamFilters(o.StreamOffset, o.StreamFilter)
		}
	}

	if on := o.OnActive; on != nil {
		opts.OnLinkStateProperties = func(props map[string]any) {
			if active, ok := props[transport.ActiveProperty].(bool); ok {
				on(active)
			}
		}
	}
	// Set before the attach, since the broker may settle a delivery as
	// soon as it arrives; out is filled in below.
	out := &Receiver{window: o.Credit, conn: s.conn, replyNode: replyNode}
	if !o.Settled && s.conn.settlesHeld() {
		on := o.OnBrokerSettled
		opts.OnDeliveryStateChanged = func(m *amqp.Message, state amqp.DeliveryState) {
			oc, err := outcomeOf(state)
			if err != nil {
				return // not terminal: the delivery is still the runtime's
			}
			out.brokerSettled(m)
			// RabbitMQ assigns the link nothing more until the client
			// settles the delivery too; what it answers does not matter,
			// the message is back on the queue. Off this goroutine, which
			// a disposition waits for.
			go out.unlock(m)
			if on != nil {
				on(oc)
			}
		}
	}
	rcv, err := s.s.NewReceiver(ctx, source, opts)
	if err != nil {
		name := source
		if o.Dynamic && name == "" {
			name = "(dynamic)"
		}
		return nil, s.conn.linkError(ctx, name, "attach", err)
	}
	if err := sqlRefused(o, rcv); err != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainTimeout)
		_ = rcv.Close(closeCtx)
		cancel()
		return nil, err
	}
	addr := source
	if opts.DynamicAddress {
		addr = rcv.Address()
	}
	out.r, out.addr = rcv, addr
	if d == address.RabbitMQ4 && !o.Dynamic && o.Address.Kind() == address.KindQueue {
		out.queue = o.Address.Name()
	}
	if d == address.Artemis && !o.Dynamic && o.Address.Kind() == address.KindQueue {
		out.queue = o.Address.Name()
		if _, q, fq := o.Address.FQQN(); fq {
			out.queue = q
		}
	}
	return out, nil
}

// Receiver is a receiver link with manual credit. It implements
// transport.Receiver.
type Receiver struct {
	r         *amqp.Receiver
	addr      string
	window    uint32
	conn      *Conn
	replyNode string // a dynamic receiver's kind of node (Conn.ReplyNode)
	queue     string // the RabbitMQ 4 or Artemis queue it receives from, for Consumers

	received atomic.Uint64 // transfers returned by Receive

	// bmu guards gone: the delivery tags of the deliveries the broker
	// settled itself (the link's goroutine adds, Settle takes away), so
	// that the runtime's outcome for one is not sent a second time.
	bmu  sync.Mutex
	gone map[string]struct{}

	mu      sync.Mutex // guards issued and closing, and orders IssueCredit before Close
	issued  uint64
	closing bool
}

var _ transport.Receiver = (*Receiver)(nil)

// ReplyNode says what kind of node a dynamic receiver got (ReplyDirect,
// ReplyTemporaryQueue, ReplyQueue, or "dynamic" off RabbitMQ 4); empty
// for any other receiver.
func (r *Receiver) ReplyNode() string { return r.replyNode }

// Address is the source as attached (the broker's address when Dynamic).
func (r *Receiver) Address() string { return r.addr }

// Consumers reads the consumer count of the link's queue from RabbitMQ 4's
// management node, or Artemis's management address
// (transport.ConsumerCounter); it counts the consumers waiting on a
// single-active-consumer or exclusive queue too. Off those brokers, or for
// a link that receives from no queue of its own naming, it is not supported.
func (r *Receiver) Consumers(ctx context.Context) (int, error) {
	if r.queue == "" || r.conn.mgmt == nil {
		return 0, fmt.Errorf("amqpactor: consumer count of %s: %w", r.addr, transport.ErrNotSupported)
	}
	if r.conn.dialect == address.Artemis {
		return r.conn.artemis.ConsumerCount(ctx, r.queue)
	}
	info, err := r.conn.mgmt.QueueInfo(ctx, r.queue)
	if err != nil {
		return 0, err
	}
	return int(info.Consumers), nil
}

// IssueCredit adds n to the link credit. When the receiver was attached with
// a Credit window, the credit outstanding (granted and not yet returned by
// Receive) may never exceed it: a grant that would is refused with an error
// wrapping ErrCreditWindow and nothing is granted. It fails once Close has
// begun, so no flow frame can follow the detach.
func (r *Receiver) IssueCredit(n uint32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := transport.CheckGrant(r.addr, r.closing, errClosed, n, r.issued-r.received.Load(), r.window); err != nil || n == 0 {
		return err
	}
	if err := r.r.IssueCredit(n); err != nil {
		return &transport.LinkError{Address: r.addr, Op: "receive", Err: err}
	}
	r.issued += uint64(n)
	return nil
}

// Receive blocks for the next transfer.
func (r *Receiver) Receive(ctx context.Context) (*amqp.Message, error) {
	m, err := r.r.Receive(ctx, nil)
	if err != nil {
		return nil, r.conn.linkError(ctx, r.addr, "receive", err)
	}
	r.received.Add(1)
	return m, nil
}

// Prefetched returns a transfer that has arrived already, or nil; see
// transport.Prefetcher.
func (r *Receiver) Prefetched() *amqp.Message {
	m := r.r.Prefetched()
	if m != nil {
		r.received.Add(1)
	}
	return m
}

var _ transport.Prefetcher = (*Receiver)(nil)

// Settle sends the outcome for m through the link m came from. A pre-settled
// message needs no outcome and returns nil.
func (r *Receiver) Settle(ctx context.Context, m *amqp.Message, o messages.Outcome) (err error) {
	if m == nil {
		return errors.New("amqpactor: settle: nil message")
	}
	defer func() {
		// go-amqp dereferences the receiver recorded in m; a message that
		// did not come from a receiver has none.
		if p := recover(); p != nil {
			err = &transport.LinkError{Address: r.addr, Op: "receive",
				Err: fmt.Errorf("settle a message that did not come from a receiver link: %v", p)}
		}
	}()
	if r.settledByBroker(m) {
		return &transport.LinkError{Address: r.addr, Op: "receive", Err: transport.ErrSettledByBroker}
	}
	var e *amqp.Error
	if r.conn.dialect == address.ServiceBus {
		o, e = serviceBusOutcome(o)
	}
	switch o.Kind {
	case messages.Accepted:
		err = r.r.AcceptMessage(ctx, m)
	case messages.Rejected:
		if e == nil && (o.Condition != "" || o.Description != "") {
			cond := o.Condition
			if cond == "" {
				cond = "amqp:internal-error"
			}
			e = &amqp.Error{Condition: amqp.ErrCond(cond), Description: o.Description}
		}
		err = r.r.RejectMessage(ctx, m, e)
	case messages.Released:
		err = r.r.ReleaseMessage(ctx, m)
	case messages.Modified:
		err = r.r.ModifyMessage(ctx, m, &amqp.ModifyMessageOptions{
			DeliveryFailed: o.DeliveryFailed, UndeliverableHere: o.UndeliverableHere})
	default:
		return fmt.Errorf("amqpactor: settle on %s: unknown outcome kind %d", r.addr, o.Kind)
	}
	return r.conn.linkError(ctx, r.addr, "receive", err)
}

// settlesHeld reports whether the broker may settle a delivery the
// runtime still holds: RabbitMQ 4.3 and later do at a quorum queue's
// consumer timeout. Only then does a receiver watch for it, since go-amqp
// keeps a copy of every unsettled delivery for the watch.
func (c *Conn) settlesHeld() bool {
	if c.amqp == nil {
		return false
	}
	major, minor, ok := rabbitRelease(c.amqp.Properties())
	return ok && (major > 4 || major == 4 && minor >= 3)
}

// brokerSettled records that the broker settled m itself (RabbitMQ 4.3
// releases a delivery held past its quorum queue's consumer timeout).
// Delivery tags are unique on a link while their deliveries are unsettled.
func (r *Receiver) brokerSettled(m *amqp.Message) {
	r.bmu.Lock()
	if r.gone == nil {
		r.gone = make(map[string]struct{})
	}
	r.gone[string(m.DeliveryTag)] = struct{}{}
	r.bmu.Unlock()
}

// unlock settles m, which the broker settled already, so that it assigns
// the link further deliveries; an error means the link is gone, and with
// it the broker's wait.
func (r *Receiver) unlock(m *amqp.Message) {
	ctx, cancel := closeContext(context.Background())
	defer cancel()
	_ = r.r.AcceptMessage(ctx, m)
}

// settledByBroker reports whether the broker settled m already, and
// forgets it: each delivery is settled once by the runtime.
func (r *Receiver) settledByBroker(m *amqp.Message) bool {
	r.bmu.Lock()
	defer r.bmu.Unlock()
	if len(r.gone) == 0 {
		return false
	}
	k := string(m.DeliveryTag)
	_, ok := r.gone[k]
	delete(r.gone, k)
	return ok
}

// Close stops further credit, drains what is granted (at most drainTimeout),
// and detaches, bounded by ctx (DefaultCloseTimeout when it has no deadline).
// Deliveries not yet settled go back to the broker.
func (r *Receiver) Close(ctx context.Context) error {
	ctx, cancel := closeContext(ctx)
	defer cancel()
	if r.beginClose() {
		// Draining flushes any credit still pending inside go-amqp, so no
		// flow frame can go out after the detach (go-amqp issue 367). An
		// error here only means the link is already gone.
		dctx, dcancel := context.WithTimeout(ctx, drainTimeout)
		_ = r.r.DrainCredit(dctx, nil)
		dcancel()
	}
	return linkError(ctx, r.addr, "detach", nodeGone(r.r.Close(ctx)))
}

// beginClose marks the receiver closing and reports whether credit must be
// drained first: only by the first Close, and only if credit was issued.
func (r *Receiver) beginClose() (drain bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := !r.closing
	r.closing = true
	return first && r.issued > 0
}

// nodeGone forgives a close whose link the broker had detached because its
// node was deleted: an auto-delete node (a reply queue, a topic subscription
// queue) goes with its last link, and RabbitMQ says so in the detach. The
// closer wanted the link gone; it is.
func nodeGone(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Condition == amqp.ErrCondResourceDeleted {
		return nil
	}
	return err
}
