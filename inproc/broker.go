package inproc

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport"
)

// Broker is an in-process AMQP broker. It is a transport.Connector; every
// method is safe for concurrent use. The zero value is not usable: call New.
type Broker struct {
	cfg config

	ids atomic.Uint64 // queue, receiver and dynamic-node numbers

	queues  sync.Map // string -> *queue: addressable anycast nodes
	topics  sync.Map // string -> *topic
	streams sync.Map // string -> *stream

	mu       sync.Mutex // guards the fields below; never held on the hot path
	conns    map[*conn]struct{}
	links    map[address.Address]map[link]struct{}
	refusals map[address.Address]*amqp.Error
	rejects  map[address.Address]*amqp.Error
	nRejects atomic.Int32 // len(rejects), read without the lock by Send

	maxSessions atomic.Int32 // sessions one connection may hold; 0: no limit
}

// link is what the fault hooks can end: a sender or a receiver link.
type link interface {
	// end ends the link with cause (what Send/Receive then report).
	end(cause error)
	// session is the session the link was attached on.
	session() *session
}

type config struct {
	replyPrefix string
	noRelay     bool
	maxSessions int
}

// Option configures a Broker.
type Option func(*config)

// WithReplyPrefix sets the prefix of the names of dynamic reply nodes
// (default "$inproc.reply."); a number follows it.
func WithReplyPrefix(prefix string) Option {
	return func(c *config) { c.replyPrefix = prefix }
}

// WithoutAnonymousRelay makes the broker offer no anonymous relay, as a
// peer without ANONYMOUS-RELAY: Features().AnonymousRelay is false and an
// attach to the anonymous terminus is refused with amqp:not-implemented.
func WithoutAnonymousRelay() Option {
	return func(c *config) { c.noRelay = true }
}

// WithMaxSessions limits every connection to n sessions at once, as
// RabbitMQ's channel-max does (see SetMaxSessions). Zero, the default, means
// no limit.
func WithMaxSessions(n int) Option {
	return func(c *config) { c.maxSessions = n }
}

// New returns an empty broker.
func New(opts ...Option) *Broker {
	b := &Broker{
		cfg:      config{replyPrefix: "$inproc.reply."},
		conns:    make(map[*conn]struct{}),
		links:    make(map[address.Address]map[link]struct{}),
		refusals: make(map[address.Address]*amqp.Error),
		rejects:  make(map[address.Address]*amqp.Error),
	}
	for _, o := range opts {
		if o != nil {
			o(&b.cfg)
		}
	}
	b.SetMaxSessions(b.cfg.maxSessions)
	return b
}

var _ transport.Connector = (*Broker)(nil)

// Dialect reports address.Artemis: addresses are plain names, and the
// fully qualified "address::queue" form is accepted.
func (b *Broker) Dialect() address.Dialect { return address.Artemis }

// String describes the connector.
func (b *Broker) String() string { return "inproc" }

// Connect opens a connection. It fails only when ctx is done.
func (b *Broker) Connect(ctx context.Context) (transport.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := &conn{b: b, done: make(chan struct{}), owner: owner[*session]{owned: map[*session]struct{}{}}, advertised: int(b.maxSessions.Load())}
	b.mu.Lock()
	b.conns[c] = struct{}{}
	b.mu.Unlock()
	return c, nil
}

// DeclareQueue creates the queue name if it does not exist yet, so that
// messages published before any receiver attaches are kept.
func (b *Broker) DeclareQueue(name string) {
	b.queue(name, true)
}

// queue finds the addressable queue name, creating it when create is set.
func (b *Broker) queue(name string, create bool) *queue {
	if v, ok := b.queues.Load(name); ok {
		return v.(*queue)
	}
	if !create {
		return nil
	}
	q := &queue{id: b.ids.Add(1), name: name}
	v, _ := b.queues.LoadOrStore(name, q)
	return v.(*queue)
}

// subscription finds or creates the durable subscription sub of the topic
// name: the queue "name::sub", bound to the topic from its creation until
// the broker goes, whatever links come and go. A queue of that name that
// exists already (declared, or attached as a Queue) is bound as it is, as
// Artemis binds a queue named by its fully qualified name. Its binding
// keys become keys, whatever an earlier attach bound it with.
func (b *Broker) subscription(name, sub string, keys address.BindingKeys) (*queue, error) {
	if strings.Contains(sub, "::") {
		return nil, &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondInvalidField,
			Description: "subscription name may not contain '::'"}}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queue(name+"::"+sub, true)
	if q.temporary {
		return nil, &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondResourceLocked,
			Description: "a dynamic node is exclusive to the link that created it"}}
	}
	q.bind(keys)
	if !q.bound {
		q.bound = true
		b.topic(name).add(q)
	}
	return q, nil
}

// newDynamic creates a private, addressable reply node.
func (b *Broker) newDynamic() *queue {
	id := b.ids.Add(1)
	q := &queue{id: id, name: b.cfg.replyPrefix + strconv.FormatUint(id, 10), temporary: true}
	b.queues.Store(q.name, q)
	return q
}

// deleteQueue removes a temporary queue from the address space.
func (b *Broker) deleteQueue(q *queue) {
	b.queues.CompareAndDelete(q.name, q)
}

func (b *Broker) topic(name string) *topic {
	if v, ok := b.topics.Load(name); ok {
		return v.(*topic)
	}
	v, _ := b.topics.LoadOrStore(name, &topic{name: name})
	return v.(*topic)
}

// Publish routes m to a as a settled publish from outside any connection,
// for tests that need a message in place. It fails only when m could not be
// encoded by go-amqp or a is invalid. The broker keeps its own copy of m.
func (b *Broker) Publish(a address.Address, m *amqp.Message) error {
	if m == nil {
		return errors.New("inproc: Publish: nil message")
	}
	if err := a.Validate(); err != nil {
		return err
	}
	s, err := own(m)
	if err != nil {
		return err
	}
	b.route(a, s, nil)
	s.release()
	return nil
}

// route delivers one stored message to a. cached, when not nil, holds the
// sender's last queue lookup.
func (b *Broker) route(a address.Address, s *stored, cached *atomic.Pointer[queue]) {
	if a.IsStream() {
		b.stream(a.Name()).append(s)
		return
	}
	if a.Kind() == address.KindTopic {
		if v, ok := b.topics.Load(a.Name()); ok {
			v.(*topic).publish(s)
		}
		return
	}
	var q *queue
	if cached != nil {
		q = cached.Load()
	}
	if q == nil || q.gone.Load() {
		q = b.queue(a.Name(), false)
		if q == nil {
			return // no node: dropped, as a broker with no queue would
		}
		if cached != nil {
			cached.Store(q)
		}
	}
	q.publish(s.entry())
}

// targets resolves a to the queues a message would land on now.
func (b *Broker) targets(a address.Address, into []*queue) []*queue {
	if a.Kind() == address.KindTopic {
		if v, ok := b.topics.Load(a.Name()); ok {
			into = append(into, v.(*topic).snapshot()...)
		}
		return into
	}
	if q := b.queue(a.Name(), false); q != nil {
		into = append(into, q)
	}
	return into
}

func (b *Broker) register(a address.Address, l link) {
	b.mu.Lock()
	set := b.links[a]
	if set == nil {
		set = make(map[link]struct{})
		b.links[a] = set
	}
	set[l] = struct{}{}
	b.mu.Unlock()
}

func (b *Broker) unregister(a address.Address, l link) {
	b.mu.Lock()
	if set := b.links[a]; set != nil {
		delete(set, l)
		if len(set) == 0 {
			delete(b.links, a)
		}
	}
	b.mu.Unlock()
}

func (b *Broker) forgetConn(c *conn) {
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
}

// refusal returns the attach error for a, or nil.
func (b *Broker) refusal(a address.Address) error {
	b.mu.Lock()
	e := b.refusals[a]
	b.mu.Unlock()
	if e == nil {
		return nil
	}
	return &transport.LinkError{Address: a.String(), Op: "attach", Err: &amqp.LinkError{RemoteErr: cloneErr(e)}}
}

// rejection returns the rejection rule for a, or nil.
func (b *Broker) rejection(a address.Address) *amqp.Error {
	if b.nRejects.Load() == 0 {
		return nil
	}
	b.mu.Lock()
	e := b.rejects[a]
	b.mu.Unlock()
	return e
}

func cloneErr(e *amqp.Error) *amqp.Error {
	c := *e
	return &c
}

// ---- fault injection ----

// DetachLinks ends every link attached to a (exactly that kind and name; a
// dynamic receiver is attached to address.Raw of its node name), as a broker
// that detaches with an error would. Their Send and Receive then return a
// *transport.LinkError whose Err is an *amqp.LinkError with RemoteErr
// {Condition: condition, Description: description}; a receiver's unsettled
// deliveries go back to the head of their queue. It returns how many links it
// ended.
func (b *Broker) DetachLinks(a address.Address, condition, description string) int {
	b.mu.Lock()
	var ls []link
	for l := range b.links[a] {
		ls = append(ls, l)
	}
	b.mu.Unlock()
	for _, l := range ls {
		l.end(&amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCond(condition), Description: description}})
	}
	return len(ls)
}

// DropConnections ends every open connection as a lost connection would:
// Done is closed, Err returns an *amqp.ConnError, and every link on it ends
// (Send and Receive return a *transport.LinkError wrapping that
// *amqp.ConnError; unsettled deliveries go back to their queues). When err is
// (or wraps) an *amqp.Error it becomes RemoteErr; otherwise RemoteErr is
// amqp:connection:forced with err's text as the description. It returns how
// many connections it ended.
func (b *Broker) DropConnections(err error) int {
	remote := &amqp.Error{Condition: amqp.ErrCondConnectionForced, Description: "inproc: connection dropped"}
	var ae *amqp.Error
	switch {
	case errors.As(err, &ae):
		remote = cloneErr(ae)
	case err != nil:
		remote.Description = err.Error()
	}
	b.mu.Lock()
	cs := make([]*conn, 0, len(b.conns))
	for c := range b.conns {
		cs = append(cs, c)
	}
	b.mu.Unlock()
	for _, c := range cs {
		c.end(&amqp.ConnError{RemoteErr: remote}, true)
	}
	return len(cs)
}

// SetMaxSessions limits every connection to n sessions at once (n <= 0: no
// limit). A begin past the limit is refused with amqp:resource-limit-exceeded
// (an *amqp.SessionError), the connection staying open. Connections opened
// from now on also advertise n (their MaxSessions, as an open's channel-max
// would); those open already keep the figure they advertised but are held
// to the new limit, as a broker that advertises more than it allows.
func (b *Broker) SetMaxSessions(n int) {
	b.maxSessions.Store(int32(max(n, 0)))
}

// EndSessions ends sessions as a broker that ends them with an error would:
// every session on every open connection when a is the zero Address, else
// every session with a link attached to a (exactly that kind and name; a
// dynamic receiver is attached to address.Raw of its node name). Every link
// on such a session ends, not only those on a: their Send and Receive then
// return a *transport.LinkError whose Err is an *amqp.SessionError with
// RemoteErr {Condition: condition, Description: description}, unsettled
// deliveries go back to the head of their queues, and a new link on the
// session fails to attach with that error. The connections stay open, so a
// new session can be begun on them. It returns how many sessions it ended.
func (b *Broker) EndSessions(a address.Address, condition, description string) int {
	b.mu.Lock()
	ss := make(map[*session]struct{})
	if a.IsZero() {
		cs := make([]*conn, 0, len(b.conns))
		for c := range b.conns {
			cs = append(cs, c)
		}
		b.mu.Unlock()
		for _, c := range cs {
			c.mu.Lock()
			for s := range c.owned {
				ss[s] = struct{}{}
			}
			c.mu.Unlock()
		}
	} else {
		for l := range b.links[a] {
			ss[l.session()] = struct{}{}
		}
		b.mu.Unlock()
	}
	n := 0
	for s := range ss {
		if s.end(&amqp.SessionError{RemoteErr: &amqp.Error{Condition: amqp.ErrCond(condition), Description: description}}) {
			n++
		}
		s.c.forget(s)
	}
	return n
}

// RefuseAttach makes every later attach of a sender or receiver to a (exactly
// that kind and name) fail with a *transport.LinkError{Op: "attach"} whose Err
// is an *amqp.LinkError with RemoteErr {condition, description}, until
// ClearRefusals. Links already attached are not touched.
func (b *Broker) RefuseAttach(a address.Address, condition, description string) {
	b.mu.Lock()
	b.refusals[a] = &amqp.Error{Condition: amqp.ErrCond(condition), Description: description}
	b.mu.Unlock()
}

// ClearRefusals lifts every RefuseAttach.
func (b *Broker) ClearRefusals() {
	b.mu.Lock()
	clear(b.refusals)
	b.mu.Unlock()
}

// RejectPublish makes every later unsettled send to a (exactly that kind and
// name) yield the outcome {Kind: Rejected, Condition: condition, Description:
// description} without storing the message, until ClearRejects. A settled
// send to a is silently dropped. Transactional publishes are not affected.
func (b *Broker) RejectPublish(a address.Address, condition, description string) {
	b.mu.Lock()
	b.rejects[a] = &amqp.Error{Condition: amqp.ErrCond(condition), Description: description}
	b.nRejects.Store(int32(len(b.rejects)))
	b.mu.Unlock()
}

// ClearRejects lifts every RejectPublish.
func (b *Broker) ClearRejects() {
	b.mu.Lock()
	clear(b.rejects)
	b.nRejects.Store(0)
	b.mu.Unlock()
}

// ---- introspection ----

// QueueDepth reports how many messages wait on the queue name, not counting
// those out for delivery. A queue that does not exist has depth 0. Expired
// messages are not counted: they are dropped here, as on delivery.
func (b *Broker) QueueDepth(name string) int {
	return b.queueLocked(name, func(q *queue) int {
		q.purgeExpiredLocked()
		return q.msgs.len()
	})
}

// queueLocked is f of the queue name under its lock, or 0 when there is no
// such queue: what the introspection reads of a queue's state.
func (b *Broker) queueLocked(name string, f func(q *queue) int) int {
	q := b.queue(name, false)
	if q == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return f(q)
}

// Unsettled reports how many messages of the queue name are out for delivery:
// transferred to a receiver link and not yet settled.
func (b *Broker) Unsettled(name string) int {
	q := b.queue(name, false)
	if q == nil {
		return 0
	}
	return int(q.out.Load())
}

// Expired reports how many messages of the queue name expired (their
// header TTL or absolute-expiry-time passed) and were dropped undelivered.
func (b *Broker) Expired(name string) int {
	return b.queueLocked(name, func(q *queue) int { return int(q.expired) })
}

// HasQueue reports whether an addressable queue (declared, subscribed or
// dynamic) named name exists.
func (b *Broker) HasQueue(name string) bool {
	return b.queue(name, false) != nil
}

// Subscriptions reports how many subscription queues the topic name has: one
// per durable subscription name ever attached, plus one per attached
// ephemeral receiver link.
func (b *Broker) Subscriptions(topicName string) int {
	v, ok := b.topics.Load(topicName)
	if !ok {
		return 0
	}
	return len(v.(*topic).snapshot())
}

// Links reports how many sender and receiver links are attached to a.
func (b *Broker) Links(a address.Address) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.links[a])
}

// Conns reports how many connections are open.
func (b *Broker) Conns() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.conns)
}

// DeadLetters returns fresh copies of the messages rejected on the queue
// name, oldest first. Each carries the rejecting outcome's condition and
// description in the message annotations "x-opt-inproc-condition" and
// "x-opt-inproc-description" (when set).
func (b *Broker) DeadLetters(name string) []*amqp.Message {
	q := b.queue(name, false)
	if q == nil {
		return nil
	}
	q.mu.Lock()
	dead := append([]deadLetter(nil), q.dead...)
	q.mu.Unlock()
	out := make([]*amqp.Message, 0, len(dead))
	for _, d := range dead {
		m := d.e.msg.deliver(!d.e.delivered, d.e.count)
		if d.condition != "" || d.description != "" {
			if m.Annotations == nil {
				m.Annotations = amqp.Annotations{}
			}
			if d.condition != "" {
				m.Annotations["x-opt-inproc-condition"] = d.condition
			}
			if d.description != "" {
				m.Annotations["x-opt-inproc-description"] = d.description
			}
		}
		out = append(out, m)
	}
	return out
}
