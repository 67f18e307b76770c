// Package transport is the seam between the actors and the wire: small
// interfaces for a connection, a session and the two kinds of link. Three
// packages implement them: transport/amqpwire (AMQP 1.0 brokers, go-amqp on
// the wire), transport/amqp091 (RabbitMQ over AMQP 0-9-1, amqp091-go on the
// wire) and inproc (the in-process broker).
//
// Every method that talks to a peer may block, so actors call them only from
// goroutines they own, never from Receive. Every such method takes a context
// and returns by its deadline.
package transport

import (
	"context"
	"errors"
	"fmt"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
)

// ErrNotSupported is wrapped by every error that reports a feature the peer or
// the wire library does not have (e.g. transactions on go-amqp).
var ErrNotSupported = errors.New("not supported")

// BindingKeysChecker is implemented by a Connector that knows, before it
// connects, whether its broker can bind a topic subscription by pattern
// (ReceiverOptions.BindingKeys). Subscribe asks it and fails at once with
// its error, which names the address and the broker's limit, instead of at
// the attach.
type BindingKeysChecker interface {
	CheckBindingKeys(a address.Address, k address.BindingKeys) error
}

// StreamChecker is implemented by a Connector that knows, before it
// connects, whether its broker has streams (address.Stream). Subscribe
// asks it and fails at once with its error, which names the address and
// the broker's limit, instead of at the attach.
type StreamChecker interface {
	CheckStream(a address.Address) error
}

// Connector opens connections to one broker.
type Connector interface {
	// Dialect says how addresses are spelt on this broker.
	Dialect() address.Dialect
	// Connect opens one connection.
	Connect(ctx context.Context) (Conn, error)
	// String describes the connector for logs and the tree. It never
	// contains credentials.
	String() string
}

// Features says what a connection can do beyond plain links.
type Features struct {
	// DynamicSource: the broker creates a temporary node for a receiver
	// attached with ReceiverOptions.Dynamic. When false, a transport may still
	// honour Dynamic by declaring a private reply queue itself.
	DynamicSource bool
	// Transactions: the Conn implements Transactional.
	Transactions bool
	// AnonymousRelay: the peer offers ANONYMOUS-RELAY, so a sender attached
	// with a zero SenderOptions.Address (the anonymous terminus) takes
	// messages for any node, each naming its destination in properties.to;
	// the Sender is then a Relay.
	AnonymousRelay bool
	// Broker names the peer as it introduced itself when the connection
	// opened: its product and version properties ("RabbitMQ 4.3.6"), or
	// empty where it sent neither. Behaviour that changed between
	// releases is told apart by it.
	Broker string
}

// SessionLimit is implemented by a Conn that knows how many sessions its
// peer lets it hold at once: the open's channel-max plus one (AMQP 1.0), the
// tune's channel-max (0-9-1). The runtime spreads its sessions over as many
// connections as that figure needs; zero means unknown.
type SessionLimit interface {
	MaxSessions() int
}

// Conn is one AMQP connection.
type Conn interface {
	NewSession(ctx context.Context) (Session, error)
	// Done is closed when the connection ends, by Close or by failure.
	Done() <-chan struct{}
	// Err says why Done was closed (nil after a clean Close).
	Err() error
	Features() Features
	Close(ctx context.Context) error
}

// Session is one AMQP session.
type Session interface {
	NewSender(ctx context.Context, o SenderOptions) (Sender, error)
	NewReceiver(ctx context.Context, o ReceiverOptions) (Receiver, error)
	Close(ctx context.Context) error
}

// SenderOptions configures a sender link. A sender link's settle mode is
// always mixed: each transfer says whether it is settled (Sender.Send).
type SenderOptions struct {
	// Address is the target. The zero Address attaches to the anonymous
	// terminus (a target with a null address), where Features.AnonymousRelay
	// says the peer has one: the Sender returned is then a Relay.
	Address address.Address
}

// Sender is a sender link.
type Sender interface {
	// Send writes m. For a settled transfer it returns a nil Receipt once the
	// transfer is written; otherwise the Receipt yields the peer's outcome.
	// Send does not wait for the outcome, so sends can be pipelined.
	Send(ctx context.Context, m *amqp.Message, settled bool) (Receipt, error)
	// Address is the target as attached.
	Address() string
	Close(ctx context.Context) error
}

// Relay is a Sender attached to the anonymous terminus: each transfer goes
// to the node its properties.to names. A node the peer cannot route to
// fails that transfer only (RabbitMQ 4 and the in-process broker answer
// released), never the link.
type Relay interface {
	Sender
	// SendTo sends m to a: the transport spells a in properties.to as its
	// dialect does (and whatever else the dialect needs to route it) on a
	// copy of m, which it does not change. Send on a Relay sends m as it is
	// and fails when m has no properties.to.
	SendTo(ctx context.Context, a address.Address, m *amqp.Message, settled bool) (Receipt, error)
}

// Receipt yields the outcome of one unsettled transfer.
type Receipt interface {
	Wait(ctx context.Context) (messages.Outcome, error)
}

// Resolved is implemented by a Receipt whose outcome may already be known
// when Send returns (the in-process broker decides at once): the sender then
// answers its publisher without a hand-off to the goroutine that waits for
// outcomes.
type Resolved interface {
	Resolved() (messages.Outcome, bool)
}

// ReusableReceipt is implemented by a Receipt the transport reuses: its one
// holder calls Recycle once it is done with it (after Wait, or instead of
// it), and never touches it again.
type ReusableReceipt interface {
	Recycle()
}

// ReceiverOptions configures a receiver link.
type ReceiverOptions struct {
	// Address is the source; zero when Dynamic.
	Address address.Address
	// Dynamic asks for a temporary node that lives as long as the link (a
	// reply address). Receiver.Address reports it.
	Dynamic bool
	// Subscription names the subscriber's own node when a topic is
	// received: a durable node that outlives the link and is shared by every
	// receiver attaching with the same name, each message going to one of
	// them (RabbitMQ4 and Artemis queue, ServiceBus subscription, the
	// in-process broker's subscription queue). Empty, on a broker that does
	// not need a name (Artemis, in-process), asks for a private node per link.
	Subscription string
	// Ephemeral asks, for a topic, for a private node of this link's own
	// that lives as long as the link, named by Subscription where the
	// broker needs a name: nothing published while it is not attached is
	// kept. The zero value asks for the durable, shared node.
	Ephemeral bool
	// BindingKeys bind a topic subscription's node to its topic: only a
	// message whose routing key (subject) one of them matches reaches it.
	// The zero value binds every message. The node's bindings end up
	// exactly these, whatever an earlier attach bound it with; a broker
	// that cannot bind by pattern fails the attach, naming its limit,
	// for any but the zero value.
	BindingKeys address.BindingKeys
	// StreamOffset, for a Stream address, is where the link starts reading
	// (the zero value: the next message appended). Each transfer carries
	// its offset in the message annotation x-stream-offset.
	StreamOffset address.StreamOffset
	// StreamFilter, for a Stream address, asks for the messages it
	// passes only (the zero value: every message). A broker may let
	// others through where its filter is coarser (filter values go by
	// chunk) or missing (property filters before RabbitMQ 4.1): the
	// runtime checks each message against the values, headers and
	// properties again. A transport that cannot apply the SQL filter fails
	// the attach, wrapping ErrNotSupported.
	StreamFilter address.StreamFilter
	// Settled asks the peer to send pre-settled transfers (at-most-once).
	Settled bool
	// Credit is the window the runtime will grant; transports use it to size
	// their buffers. Credit is only granted through IssueCredit.
	Credit uint32
	// ClassicQueue asks a RabbitMQ4 dialect to declare a classic queue
	// instead of the default quorum queue.
	ClassicQueue bool

	// QueueArguments are further arguments a RabbitMQ4 dialect declares the
	// queue of a queue address with (amqpactor.WithQueueArguments). One it
	// sets itself with another value is an error naming the key.
	QueueArguments map[string]any
	// DeadLetter, a queue, is where a RabbitMQ4 quorum queue moves what is
	// rejected or over its DeliveryLimit (x-delivery-limit; 0: the
	// broker's default); the dialect declares it, and the queue with the
	// dead-letter arguments. Zero declares no dead-lettering.
	DeadLetter    address.Address
	DeliveryLimit uint32

	// OnActive, when set, is told whether the broker holds this receiver
	// as the active consumer of a single-active-consumer queue, each time
	// the broker says so (RabbitMQ 4.3's link state property
	// rabbitmq:active). It is called from the transport's goroutine and
	// must not block. Brokers that say nothing never call it.
	OnActive func(active bool)
	// OnBrokerSettled, when set, is told of each delivery the broker
	// settled itself while the runtime still held it (RabbitMQ 4.3
	// releases a delivery whose quorum queue's consumer timeout ran out).
	// The transport answers the broker at once (RabbitMQ assigns the link
	// nothing more until the client settles the delivery too), and the
	// receiver's Settle of that delivery then sends nothing and returns an
	// error wrapping ErrSettledByBroker. It is called from the transport's
	// goroutine and must not block.
	OnBrokerSettled func(o messages.Outcome)
}

// DelayedRetrier is implemented by a Connector whose broker may delay a
// failed delivery's redelivery itself (RabbitMQ 4.3's delayed retry on
// quorum queues, the queue arguments below).
type DelayedRetrier interface {
	DelayedRetry() bool
}

// The queue arguments of RabbitMQ 4.3's delayed retry: which redeliveries
// wait ("failed": those whose delivery-count went up), and the bounds of
// the wait in milliseconds (the minimum times the delivery-count, capped
// by the maximum).
const (
	DelayedRetryType = "x-delayed-retry-type"
	DelayedRetryMin  = "x-delayed-retry-min"
	DelayedRetryMax  = "x-delayed-retry-max"
)

// ErrSettledByBroker is wrapped by the error Settle returns for a delivery
// the broker settled already (see ReceiverOptions.OnBrokerSettled): no
// disposition was sent, so the delivery is not settled twice.
var ErrSettledByBroker = errors.New("the broker settled the delivery already")

// ActiveProperty is the link state property by which RabbitMQ 4.3 tells a
// receiver of a single-active-consumer queue whether it is the active one.
const ActiveProperty = "rabbitmq:active"

// Receiver is a receiver link with manual credit: the peer sends only what
// IssueCredit has granted.
type Receiver interface {
	// Address is the source as attached (the broker's address when Dynamic).
	Address() string
	// IssueCredit adds n to the link credit.
	IssueCredit(n uint32) error
	// Receive blocks for the next transfer.
	Receive(ctx context.Context) (*amqp.Message, error)
	// Settle sends the outcome for m. It fails when the link m came from has
	// ended; the delivery is then the broker's again.
	Settle(ctx context.Context, m *amqp.Message, o messages.Outcome) error
	Close(ctx context.Context) error
}

// ErrCreditWindow is wrapped by the error IssueCredit returns when a grant
// would leave more credit outstanding than ReceiverOptions.Credit; both
// transports' ErrCreditWindow are this one error.
var ErrCreditWindow = errors.New("credit above the receiver's window")

// CheckGrant is what a Receiver checks, under its lock, before a grant of
// n: none once its Close began (closed is the transport's error for that),
// and none past its window (0: no window), each as a *LinkError naming addr.
func CheckGrant(addr string, closing bool, closed error, n uint32, outstanding uint64, window uint32) error {
	var err error
	switch {
	case closing:
		err = closed
	case window > 0:
		err = CheckCredit(n, outstanding, window)
	}
	if err != nil {
		return &LinkError{Address: addr, Op: "receive", Err: err}
	}
	return nil
}

// CheckCredit refuses, with an error wrapping ErrCreditWindow, a grant of n
// that would leave more than window outstanding; outstanding is what was
// granted and not yet received.
func CheckCredit(n uint32, outstanding uint64, window uint32) error {
	if outstanding+uint64(n) <= uint64(window) {
		return nil
	}
	return fmt.Errorf("%w: granting %d with %d outstanding exceeds the window of %d", ErrCreditWindow, n, outstanding, window)
}

// ConsumerCounter is implemented by a Receiver whose transport can read how
// many consumers the link's queue has, this one included, waiting ones of a
// single-active-consumer queue too (RabbitMQ 4's management node, the
// in-process broker): the replicas sharing a Partitioned address count
// themselves by it. One that cannot tell returns an error wrapping
// ErrNotSupported.
type ConsumerCounter interface {
	Consumers(ctx context.Context) (int, error)
}

// Transactional is implemented by a Conn whose peer has a transaction
// coordinator.
type Transactional interface {
	Begin(ctx context.Context) (Txn, error)
}

// Txn is one declared transaction.
type Txn interface {
	// Publish sends m to a inside the transaction.
	Publish(ctx context.Context, a address.Address, m *amqp.Message) error
	// Accept makes the acceptance of m, a delivery r holds unsettled, part
	// of the transaction: Commit settles it together with what was
	// published, and after a Rollback it is still r's to settle. A Txn
	// that cannot settle r's deliveries returns an error wrapping
	// ErrNotSupported. Commit fails, settling nothing, when m was settled
	// or r ended meanwhile.
	Accept(ctx context.Context, r Receiver, m *amqp.Message) error
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// LinkError reports a link that was refused or ended by the peer. It names the
// address and carries the broker's condition.
type LinkError struct {
	Address string
	// Op is "attach", "send", "receive" or "detach".
	Op  string
	Err error // usually *amqp.Error or *amqp.LinkError
}

func (e *LinkError) Error() string {
	return "amqpactor: " + e.Op + " " + e.Address + ": " + e.Err.Error()
}

func (e *LinkError) Unwrap() error { return e.Err }
