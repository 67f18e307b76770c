package protocol

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// The actor protocol. Actors talk only through these types and PIDs; a
// message that expects an answer carries a buffered channel (Done, Reply) so
// the asker can also give up with its context.

// ConnUp tells a child of the connection actor that a connection is ready.
// Children open their sessions on it; they keep their queued work meanwhile.
//
// MaxSessions is how many sessions the connection actor plans on Conn (the
// broker's figure or WithMaxSessionsPerConnection's), for the error of a
// session the broker refuses all the same; zero when unknown.
type ConnUp struct {
	Conn        transport.Conn
	MaxSessions int
}

// ConnDown tells the children that the connection ended.
type ConnDown struct{ Err error }

// Reconnect asks the connection actor to drop its connection and dial
// again: a child's escalation when new sessions fail like the old ones.
type Reconnect struct{ Err error }

// Delivery is one transfer, handed from its link's pump to the dispatcher
// and its partition by message; the partition's worker runs the handler
// and gives the outcome back to To, which sends it to the receiver actor as
// a disposition message.
type Delivery struct {
	// ID numbers the delivery within its receiver; Link numbers the link it
	// came on.
	ID, Link uint64
	Message  *messages.Message
	// Ctx ends when the link ends, so handlers stop work nobody can settle.
	Ctx context.Context
	// Raw is the transfer as the transport gave it, for To to settle.
	// Workers never touch it.
	Raw *amqp.Message
	// To takes the handler's verdict: the link the delivery came on.
	To Settler
	// Outcome is the handler's verdict, set by the worker before it hands
	// the delivery to To.
	Outcome messages.Outcome
	// Draining is closed when the link stops taking deliveries (a drain)
	// or ends: a worker waiting to retry the delivery in place stops
	// waiting. Nil never closes.
	Draining <-chan struct{}

	// Held links the delivery into its link's list of deliveries not
	// settled yet, and Claimed says a transaction settles it. Only that
	// link (a deliver.Link) touches them, under its own lock: a list
	// through the pooled Deliveries costs a hand-over nothing, where a map
	// would cost a hash and its growth per message.
	HeldPrev, HeldNext *Delivery
	HeldIn             any
	Claimed            bool
}

// A Settler takes the outcomes (each Delivery.Outcome) of deliveries it
// handed out, all of its own, in the order they were decided: it sends
// them to the receiver actor as one disposition message from the actor
// from (a partition; nil outside an actor). Each delivery is settled once;
// Settle never blocks, and a delivery of a link that has ended since is
// dropped (the broker has taken it back). The caller must not touch ds's
// deliveries afterwards; ds itself it may reuse.
type Settler interface {
	Settle(ds []*Delivery, from *actor.PID)
}

// deliveries recycles Deliveries: a fresh one per message would be garbage
// on every delivery, and the collector's work is what bounds the in-process
// path.
var deliveries = sync.Pool{New: func() any { return new(Delivery) }}

// NewDelivery returns a zero Delivery, possibly one released before.
func NewDelivery() *Delivery { return deliveries.Get().(*Delivery) }

// Settle hands o to d.To alone, from outside an actor. The caller must not
// touch d afterwards: the Settler may Release it.
func (d *Delivery) Settle(o messages.Outcome) {
	d.Outcome = o
	one := [1]*Delivery{d}
	d.To.Settle(one[:], nil)
}

// Release recycles d. Only its Settler calls it, once done with d.
func (d *Delivery) Release() {
	*d = Delivery{}
	deliveries.Put(d)
}

// Publish asks the publisher to send Message to Address. Done receives
// (through Answer) nil once the broker accepted it (or, for a settled
// publish, once it is written).
type Publish struct {
	Ctx     context.Context
	Address address.Address
	Message *amqp.Message
	Settled bool
	// Reply: a Responder's reply (to a reply-to address), which goes
	// through the replies publisher, never the App's own senders.
	Reply bool
	Done  chan<- error
	// Once, when set, is shared with whoever else may answer the caller (the
	// end of its context, the App's stop): the first to swap it sends the
	// one answer. Answer it only through Answer.
	Once *atomic.Bool
	// Request, set instead of Done, is the reply channel of a request's
	// caller: it hears a failure as a Reply (Failed), and nothing when the
	// request is accepted, since its caller waits for the reply, not for
	// the request's outcome, and would be woken for nothing.
	Request chan<- Reply
}

// Answer sends err on Done unless the caller has its answer already; for a
// request, only a failure, on its reply channel.
func (p *Publish) Answer(err error) {
	if p.Request != nil {
		if err != nil {
			p.Request <- Reply{Failed: err}
		}
		return
	}
	if p.Once == nil || p.Once.CompareAndSwap(false, true) {
		p.Done <- err
	}
}

// Handler runs once per delivery; BatchHandler once per batch.
type (
	Handler      func(ctx context.Context, m *messages.Message) error
	BatchHandler func(ctx context.Context, ms []*messages.Message) error
	// Outcomer maps a handler's result and its delivery to an outcome.
	Outcomer func(ctx context.Context, err error, m *messages.Message) messages.Outcome
)

// SubscriptionSpec describes one subscription (what an amqpactor.Subscription
// runs): enough for its session actor to attach, re-attach and dispatch.
type SubscriptionSpec struct {
	Name       string
	Address    address.Address
	Credit     uint32
	Partitions int
	Settled    bool // at-most-once
	Classic    bool // RabbitMQ4: classic queue instead of quorum
	Paused     bool // attach paused: Pause came before the subscription attached
	// AttachCtx is the context of the Start or Subscribe that asked for
	// the subscription: it bounds the first attach (its session's begin
	// and its link's attach) along with the attach's own bound. Later
	// attaches, the runtime's own, never use it.
	AttachCtx context.Context
	// Ephemeral: a topic is received through a private node of the link's
	// own instead of the durable subscription node named Node.
	Ephemeral bool
	// Node names the subscriber's own node of a topic on the broker; empty
	// means Name.
	Node string
	// BindingKeys bind a topic subscription's node to the topic (the zero
	// value: every message).
	BindingKeys address.BindingKeys
	// Stream, for a Stream address, is where the subscription is in it:
	// every link attaches at its Begin.
	Stream *StreamCursor
	// ConnPath is the path of the connection node that holds the
	// subscription's session ("connection/connection-2" for a connection of
	// the pool); empty means the first connection.
	ConnPath string

	Handler      Handler
	BatchHandler BatchHandler
	BatchSize    int
	BatchWait    time.Duration
	Outcome      Outcomer
	// HandlerTimeout, when > 0, bounds each handler call's context.
	HandlerTimeout time.Duration

	// Retry, when its Backoff is set, has the partition worker retry a
	// failed delivery in place (see Retry).
	Retry Retry

	// What a RabbitMQ4 dialect declares the queue with (see
	// transport.ReceiverOptions).
	QueueArguments map[string]any
	DeadLetter     address.Address
	DeliveryLimit  uint32

	// Balance, for a partition queue of a Partitioned subscription, is
	// shared by the receivers of its n partition queues, which balance them
	// across the App's replicas with it; Partition is this queue's index.
	Balance   *Balance
	Partition int
}

// Retry is how a partition worker retries a failed delivery in place: it
// waits Delay(n) after the n-th failed attempt, holding back the rest of its
// partition, and runs the handler again with the delivery-count one higher,
// as a redelivery would show it, until the attempt whose delivery-count + 1
// reaches MaxDeliveries; that one's failure goes to the Outcomer.
type Retry struct {
	// Backoff is the first wait; zero means no retry in place (the broker
	// redelivers). MaxBackoff caps every wait (at least Backoff); zero
	// means no cap.
	Backoff, MaxBackoff time.Duration
	// MaxDeliveries is the number of deliveries a message gets; > 0 when
	// Backoff is set.
	MaxDeliveries uint32
	// Retryable reports a failure worth another attempt (not a handler's
	// explicit verdict); nil means every failure.
	Retryable func(error) bool
	// Failed, when set, hears each failure that is retried in place, with
	// the wait before the next attempt.
	Failed func(ctx context.Context, err error, m *messages.Message, wait time.Duration)
}

// Delay is the wait after the n-th failed attempt (n >= 1): Backoff doubled
// n-1 times plus up to half as much again of jitter, capped by MaxBackoff.
// Before the cap each wait is longer than the one before, jitter or not.
func (r *Retry) Delay(n int) time.Duration {
	limit := time.Duration(math.MaxInt64)
	if r.MaxBackoff > 0 {
		limit = max(r.MaxBackoff, r.Backoff)
	}
	d := r.Backoff
	for i := 1; i < n && d < limit; i++ {
		if d > limit/2 {
			return limit
		}
		d *= 2
	}
	if d >= limit || d <= 0 {
		return limit
	}
	if half := int64(d / 2); half > 0 {
		d += time.Duration(rand.Int64N(half))
	}
	return min(d, limit)
}

// Subscribe asks the connection to run a subscription; Done receives the
// result of its first attach.
type Subscribe struct {
	Spec *SubscriptionSpec
	Done chan<- error
}

// Unsubscribe detaches one subscription. Its unsettled deliveries go back to
// the broker. Done is closed when it is gone.
type Unsubscribe struct {
	Name string
	// Ctx bounds the whole detach, Graceful (nil: Ctx) its graceful part;
	// see Drain.
	Ctx, Graceful context.Context
	Done          chan<- error
}

// Drain is the first step of a graceful stop: stop taking new work, finish
// and settle what is in flight, detach links and end sessions. Graceful
// bounds the graceful part: when it ends, handlers' contexts are cancelled,
// what is unsettled goes back to the broker as released and links close at
// once. Ctx bounds the whole drain; every actor answers Done (with the
// first error met) by its end. A nil Graceful means Ctx.
type Drain struct {
	Ctx, Graceful context.Context
	Done          chan<- error
}

// Grace is the graceful part of the drain: Graceful, or Ctx without one.
func (d *Drain) Grace() context.Context {
	if d.Graceful != nil {
		return d.Graceful
	}
	return d.Ctx
}

// Pause stops granting credit to a subscription; Resume grants it again.
type (
	Pause  struct{ Name string }
	Resume struct{ Name string }
)

// Request asks the requests actor for a reply to Message.
type Request struct {
	// Key is the correlation the reply must carry (see CorrelationKey).
	Key     string
	Ctx     context.Context
	Address address.Address
	Message *messages.Message
	Reply   chan<- Reply
}

// Reply is the answer to a Request. The requests actor first answers with
// Send, the request as it goes on the wire (reply-to set), which the caller
// publishes; then with the reply Message, or Err. The publish of the
// request may add its failure, Failed (Publish.Request). Reply channels
// hold all three.
type Reply struct {
	Send    *amqp.Message
	Message *messages.Message
	Err     error
	Failed  error
}

// Begin asks the txn actor for a transaction.
type Begin struct {
	Ctx   context.Context
	Reply chan<- BeginResult
}

// BeginResult answers Begin.
type BeginResult struct {
	Txn transport.Txn
	Err error
}

// TxnEnded tells the txn actor a transaction was discharged.
type TxnEnded struct{ Committed bool }

// Describe asks an actor for its Node; it answers Described with ctx.Respond.
type Describe struct{}

// Described is an actor's own node and the PIDs of its children, which the
// asker describes in turn: no actor ever waits for another.
type Described struct {
	Node     *Node
	Children []*actor.PID
	// Self, when set, is the PID of the actor that answered, where it is
	// not the one asked (the App's root forwards to the connection actor).
	Self *actor.PID
	// Gone are children whose actors have stopped for good (failed), shown
	// as they were last.
	Gone []*Node
}

// Node is one actor in the tree returned by App.Tree.
//
// PID is the actor's PID as protobuf text (Address:"nonhost" Id:"…"), kept
// for compatibility and for the JSON form; ActorPID returns the same PID as
// an *actor.PID to send or request to.
type Node struct {
	Name      string            `json:"name"`
	Kind      string            `json:"kind"`
	PID       string            `json:"pid"`
	Address   string            `json:"address,omitempty"`
	State     string            `json:"state,omitempty"`
	Restarts  int               `json:"restarts"`
	LastError string            `json:"lastError,omitempty"`
	Counters  map[string]uint64 `json:"counters,omitempty"`
	Children  []*Node           `json:"children,omitempty"`
	// Broker, on the connection node, names the broker last reached as
	// its open said ("RabbitMQ 4.3.6"); empty before the first connection
	// and on every other node.
	Broker string `json:"broker,omitempty"`
	// ReplyNode, on the requests node, says what the replies come through:
	// "direct-reply-to" (RabbitMQ 4.2+, and 0-9-1), "temporary-queue" (a
	// RabbitMQ 4.1 dynamic source), "reply-queue" (a queue the runtime
	// declared: RabbitMQ 4.0) or "dynamic" (the broker's dynamic node:
	// Artemis, the in-process broker); empty before the reply link attaches.
	ReplyNode string `json:"replyNode,omitempty"`

	// pidAddress and pidID are the PID's fields as structured data, set
	// by SetActorPID when the tree is described; never parsed from PID.
	pidAddress, pidID string
}

// ActorPID returns the node's actor as an *actor.PID, a fresh value each
// call, or nil for a node that did not come from App.Tree (built by hand or
// decoded from JSON): the JSON form carries only the text PID.
func (n *Node) ActorPID() *actor.PID {
	if n == nil || n.pidID == "" {
		return nil
	}
	return actor.NewPID(n.pidAddress, n.pidID)
}

// SetActorPID records pid as the node's actor; App.Tree calls it with the
// PID it asked, for every node. A nil pid clears it.
func (n *Node) SetActorPID(pid *actor.PID) {
	if pid == nil {
		n.pidAddress, n.pidID = "", ""
		return
	}
	n.pidAddress, n.pidID = pid.Address, pid.Id
}

// States of a node.
const (
	StateAttaching  = "attaching"
	StateAttached   = "attached"
	StateDetached   = "detached"
	StateRestarting = "restarting"
	// StateStopped is the last state of every node: its actor has stopped
	// (the App stopped, or the node was removed from the tree).
	StateStopped = "stopped"
)

// StateChange is one change of a node's state, as an actor reports it; the
// App hands it on as an amqpactor.StateChange. Path is the node's path in
// the tree (the names of the nodes from the root, joined by "/").
type StateChange struct {
	Path, Kind, Address string
	From, To            string
	Err                 error
	At                  time.Time
}

type partitionKey struct{}

// Partition is what a handler's context carries of the partition that runs
// it: the subscription's address and the partition's index.
type Partition struct {
	Address address.Address
	Index   int
}

// WithPartition returns ctx carrying p.
func WithPartition(ctx context.Context, p *Partition) context.Context {
	return context.WithValue(ctx, partitionKey{}, p)
}

// PartitionFrom is the partition ctx carries, or nil.
func PartitionFrom(ctx context.Context) *Partition {
	p, _ := ctx.Value(partitionKey{}).(*Partition)
	return p
}
