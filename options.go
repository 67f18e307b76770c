package amqpactor

import (
	"log/slog"
	"maps"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/session"
	"github.com/amqpactor/amqpactor/address"
)

// Option configures an App.
type Option func(*appConfig)

type appConfig struct {
	log          *slog.Logger
	system       *actor.ActorSystem
	backoff      [2]time.Duration
	closeTimeout time.Duration
	maxSenders   int
	senderIdle   time.Duration
	name         string
	otel         otelConfig
	onState      func(StateChange)
	stopTimeout  time.Duration
	supervisor   actor.SupervisorStrategy
	maxInFlight  int64
	maxSessions  int
}

// DefaultMaxInFlightBytes is the budget of WithMaxInFlightBytes when it is
// not given.
const DefaultMaxInFlightBytes = 256 << 20

// WithMaxInFlightBytes bounds the bytes of deliveries the App holds at once,
// across all its subscriptions: received and not settled yet, plus the
// credit granted for more (reserved at the largest delivery each link has
// seen). Credit is withheld while the budget is spent, whatever WithCredit
// says, so memory stays bounded whatever the message size and the number of
// subscriptions. A link's first grant is one credit (its message size is not
// known yet), each link grants within its share of n (n over the number of
// links), and a link with nothing held and no credit always gets one, so the
// bound is n plus one message per link, for messages no larger than the
// largest their link has seen. A delivery counts the length of its data
// sections (at least one byte). Zero means DefaultMaxInFlightBytes (256 MiB);
// negative means no budget (credit alone bounds each link). The tree shows
// inflight_bytes on its root and on each receiver. Over Dial091 it bounds
// what the handlers hold, not what amqp091-go buffers: the broker sends up to
// the prefetch (WithCredit) whatever the budget.
func WithMaxInFlightBytes(n int64) Option { return func(c *appConfig) { c.maxInFlight = n } }

// WithMaxSessionsPerConnection caps the sessions the App begins on one
// connection at n. Every subscription has a session of its own, and the App
// opens as many connections as they need, each holding at most the broker's
// channel-max plus one (RabbitMQ 4 allows 64, the figure taken when the
// broker does not say) or n, whichever is lower; the first also keeps room
// for the publisher, requests and transactions. Zero, the default, means the
// broker's figure: n is for a broker that advertises more than it allows.
func WithMaxSessionsPerConnection(n int) Option {
	return func(c *appConfig) { c.maxSessions = max(n, 0) }
}

// DefaultStopTimeout bounds the stop of Run without WithStopTimeout.
const DefaultStopTimeout = 30 * time.Second

// WithStopTimeout bounds the stop that Run makes once its context is done:
// handlers get the graceful part of it to finish, then what is unsettled
// goes back to the broker. Zero (or negative) means DefaultStopTimeout.
func WithStopTimeout(d time.Duration) Option { return func(c *appConfig) { c.stopTimeout = d } }

// WithSupervisorStrategy decides for the failures of every actor under the
// App's connection actor: the publisher, requests, txn and subscription
// actors, and the senders, receivers, dispatchers and partitions under
// them. A failure is a panic, or a link the broker detached (the reason is
// then a *transport.LinkError, wrapped in an *actors.ShortLivedLink when
// the link ended within two seconds of its attach); protoactor's
// SupervisorEvent for each decision is on the actor system's EventStream.
// What each directive does to a receiver whose link was detached:
//
//   - Restart: a new incarnation re-attaches after the backoff, which
//     grows while links keep ending soon after they attach. Each restart
//     spends the strategy's budget; past it protoactor stops the receiver.
//   - Resume: the same incarnation re-attaches after the backoff.
//   - Stop: the receiver stops, and its subscription fails in turn (a
//     failure that is not a link's), which the strategy decides again for
//     the subscription: restarted, or resumed, it attaches a new session
//     and link; stopped, it turns failed (a StateChange, App.Health).
//   - Escalate: the subscription fails with the link's reason and the
//     strategy decides for it; escalated again from the connection, which
//     has no one above it to decide, the subscription is stopped and
//     reported failed. An actor that escalated and is then resumed resumes
//     the child that escalated to it.
//   - actor.NewAllForOneStrategy applies the directive to the receiver and
//     its dispatcher together (the dispatcher's partitions restart with it).
//
// Whatever the directive, Stop does not wait for a node that is gone. The
// connection actor itself is resumed after a panic, never restarted: a
// restart would stop every session and link under it. Nil, or no option,
// means a restart per panic, at most 10 a minute per actor; a detached
// link is restarted without spending that budget unless it ended within
// two seconds of its attach, and past the budget such a link is not
// stopped but re-attached at the longest backoff (WithBackoff) and shown
// degraded: a broker that keeps detaching a link is not cured by
// restarting the App, so Health stays nil (a liveness probe would only
// restart the process into the same broker), while Ready is not nil until
// a link has stayed attached for two seconds.
func WithSupervisorStrategy(s actor.SupervisorStrategy) Option {
	return func(c *appConfig) { c.supervisor = actors.UserStrategy(s) }
}

// WithLogger sets the logger. The zero value logs nothing.
func WithLogger(l *slog.Logger) Option { return func(c *appConfig) { c.log = l } }

// WithActorSystem runs the App's actors on sys instead of a system of its
// own; the App then never shuts sys down.
func WithActorSystem(sys *actor.ActorSystem) Option { return func(c *appConfig) { c.system = sys } }

// WithBackoff bounds the delays between re-attach and reconnect attempts
// (exponential with jitter). Zero values mean 100 ms and 30 s.
func WithBackoff(initial, max time.Duration) Option {
	return func(c *appConfig) { c.backoff = [2]time.Duration{initial, max} }
}

// Defaults of WithSenderLimits.
const (
	DefaultMaxSenders = session.DefaultMaxSenders // dedicated sender links
	DefaultSenderIdle = session.DefaultSenderIdle // before an unused sender retires
)

// WithSenderLimits bounds the App's sender links: at most maxSenders
// dedicated links for the addresses it publishes to (beyond them an address
// goes through the anonymous link, or, on a peer without the anonymous
// relay, the least recently used dedicated sender retires to make room),
// and a sender unused for idle retires (its link, actor and goroutines go).
// Zero values mean DefaultMaxSenders (64) and DefaultSenderIdle (1 minute).
// See docs/GUIDE.md, "Sender links", for what goes where.
func WithSenderLimits(maxSenders int, idle time.Duration) Option {
	return func(c *appConfig) { c.maxSenders, c.senderIdle = maxSenders, idle }
}

// WithCloseTimeout bounds each link, session and connection close when the
// caller's context has no deadline. Zero means 5 s. It bounds closes only:
// attaches, begins and dials have their caller's context and a bound of
// their own (see Start).
func WithCloseTimeout(d time.Duration) Option { return func(c *appConfig) { c.closeTimeout = d } }

// WithName names the App: the root of its actor tree and the prefix of the
// nodes it creates (topic subscription nodes, reply queues). Instances
// (replicas) of one service share its name, and so its durable topic
// subscriptions. Zero means a random name, and then topic subscriptions
// without WithSubscriptionName are ephemeral (WithEphemeral): a durable node
// named after a random name would never be found again, only left behind.
func WithName(name string) Option { return func(c *appConfig) { c.name = name } }

// SubscribeOption configures a subscription.
type SubscribeOption func(*subConfig)

type subConfig struct {
	credit     uint32
	partitions int
	retry      RetryPolicy
	settled    bool
	classic    bool
	batchSize  int
	batchWait  time.Duration
	name       string
	timeout    time.Duration
	queueArgs  map[string]any
	ephemeral  bool
	keys       []string
	offset     *StreamOffset
	// filter is WithStreamFilterValues', WithStreamHeaders',
	// WithStreamProperties' and WithStreamSQL's.
	filter address.StreamFilter
}

// DefaultCredit is the link credit of a subscription without WithCredit.
const DefaultCredit = 256

// DefaultPartitions is the number of partition workers without WithPartitions.
const DefaultPartitions = 8

// WithCredit sets the link credit: at most n deliveries are held at once.
// Zero means DefaultCredit.
func WithCredit(n uint32) SubscribeOption { return func(c *subConfig) { c.credit = n } }

// WithPartitions sets the number of partition workers. Messages with the same
// group-id run in order on one worker; n workers run in parallel. Zero means
// DefaultPartitions (1 for a batch subscription).
func WithPartitions(n int) SubscribeOption { return func(c *subConfig) { c.partitions = n } }

// WithRetry sets what a handler failure does. Without RetryPolicy.Backoff a
// failure goes back to the broker, and the rest of its group-id may run
// before the broker redelivers it: group-id order holds only for messages
// that succeed at once. With Backoff the partition retries it in place and
// order holds (see RetryPolicy).
func WithRetry(p RetryPolicy) SubscribeOption { return func(c *subConfig) { c.retry = p } }

// AtMostOnce asks the broker to send settled deliveries: nothing is
// redelivered, whatever the handler returns.
func AtMostOnce() SubscribeOption { return func(c *subConfig) { c.settled = true } }

// WithClassicQueue makes the RabbitMQ4 dialect declare a classic queue
// instead of a quorum queue (which counts delivery-count and enforces a
// delivery limit; classic queues do neither).
func WithClassicQueue() SubscribeOption { return func(c *subConfig) { c.classic = true } }

// WithQueueArguments adds x-arguments to the queue the RabbitMQ4 dialect
// declares for a queue address (e.g. "x-max-length": 1000); other dialects
// and the in-process broker declare nothing and ignore them. Values must be
// AMQP-encodable (nil, bool, integers, floats, string, []byte, time.Time,
// amqp.Symbol, amqp.UUID, and []any and map[string]any of them), or
// Subscribe fails naming the key. An argument the runtime sets itself
// (x-queue-type, the dead-letter ones of RetryPolicy.DeadLetter) given
// another value fails the attach, naming the key; the same value is fine.
// A queue that exists with other arguments is used as it is (a warning
// says so).
func WithQueueArguments(args map[string]any) SubscribeOption {
	return func(c *subConfig) { c.queueArgs = args }
}

// WithBatch sets the batch size and the wait for a batch subscription. A
// batch is what arrived, up to size, or what arrived within wait of its first
// message; never more than the credit. Zero wait means 50 ms.
func WithBatch(size int, wait time.Duration) SubscribeOption {
	return func(c *subConfig) { c.batchSize, c.batchWait = size, wait }
}

// WithSubscriptionName names the subscription in the tree and, for a topic,
// its durable subscription node, exactly as written: every App that
// subscribes to the topic with this name shares the node. Zero means the
// App's name, a dot and the address's name, numbered from the second
// subscription of one App to one address.
func WithSubscriptionName(name string) SubscribeOption { return func(c *subConfig) { c.name = name } }

// WithHandlerTimeout bounds each handler call: its context ends d after the
// call begins, and an ActorHandler's actor that has not answered by then
// fails the delivery (modified, so the broker redelivers it). A handler
// that ignores its context is not interrupted. Zero means no bound of its
// own (an ActorHandler then waits DefaultActorTimeout).
func WithHandlerTimeout(d time.Duration) SubscribeOption { return func(c *subConfig) { c.timeout = d } }

// WithEphemeral makes a topic subscription receive through a private node
// that lives as long as its link, as a non-durable subscriber: every instance
// of the App gets every message (the node's name carries a random suffix of
// the App instance, so replicas never share it), and nothing published while
// the link is not attached is kept for it. Without it a topic subscription is
// durable and shared: see App.Subscribe. It changes nothing for a queue.
func WithEphemeral() SubscribeOption { return func(c *subConfig) { c.ephemeral = true } }

// WithBindingKeys binds a topic subscription to the messages whose routing
// key matches one of patterns, as a topic exchange binds: words separated
// by '.', "*" matching exactly one word and "#" zero or more
// ("orders.*.eu", "orders.#", "#.us"). A message's routing key is its
// Subject. No patterns means "#": every message of the topic. The
// subscription stays durable and shared (or ephemeral with WithEphemeral);
// a durable subscription attached again with other patterns is bound with
// exactly the new ones, its old bindings removed. Subscribe fails, naming
// the address, for a pattern that is not valid (see
// address.ParseBindingKeys), for an address that is not a Topic, and on a
// broker that cannot bind by pattern (Artemis). See docs/GUIDE.md,
// "Routing keys".
func WithBindingKeys(patterns ...string) SubscribeOption {
	return func(c *subConfig) { c.keys = append(c.keys[:0:0], patterns...) }
}

// WithStreamOffset says where a subscription to a Stream starts reading:
// StreamFirst, StreamLast, StreamNext (the default), StreamAt or
// StreamSince. It is where the subscription's first link starts; every
// later one (after a detach, a lost connection, a restart of its actors)
// starts after the last offset the subscription settled in order instead.
// Subscribe fails, naming the address, for an address that is not a
// Stream and for a negative offset.
func WithStreamOffset(o StreamOffset) SubscribeOption {
	return func(c *subConfig) { c.offset = &o }
}

// StreamFilterAnnotation is the message annotation a publisher puts a
// stream message's filter value in, for WithStreamFilterValues:
// Annotations[StreamFilterAnnotation] = "eu".
const StreamFilterAnnotation = "x-stream-filter-value"

// WithStreamFilterValues has a subscription to a Stream handle only the
// messages whose filter value (Annotations[StreamFilterAnnotation], a
// string) is one of values; a message without one is not handled. On
// RabbitMQ 4 the broker skips the chunks whose bloom filter holds none of
// them (source filter rabbitmq:stream-filter); what it lets through that
// does not match is settled without its handler. Subscribe fails, naming
// the address, for an address that is not a Stream and for an empty value.
func WithStreamFilterValues(values ...string) SubscribeOption {
	return func(c *subConfig) { c.filter.Values = append(c.filter.Values[:0:0], values...) }
}

// WithStreamHeaders has a subscription to a Stream handle only the
// messages whose Headers (the application properties) hold each of props
// with exactly that string value (together with WithStreamFilterValues: the
// messages both take). RabbitMQ 4.1 and later filter on the broker
// (amqp:application-properties-filter); the runtime checks each message
// again, so a release that lets others through costs reading them, never
// a handler call. Subscribe fails, naming the address, for an address
// that is not a Stream, an empty name, and a value beginning with '&'
// (which RabbitMQ reads as a prefix or suffix match).
func WithStreamHeaders(props map[string]string) SubscribeOption {
	return func(c *subConfig) { c.filter.Headers = maps.Clone(props) }
}

// WithStreamProperties has a subscription to a Stream handle only the
// messages whose properties section holds each of props with exactly that
// string value. Keys are the fields' AMQP names: "subject", "to",
// "message-id", "correlation-id", "user-id", "reply-to", "content-type",
// "content-encoding", "group-id", "reply-to-group-id" (an id that is not a
// string never matches). RabbitMQ 4.1 and later filter on the broker
// (amqp:properties-filter); the runtime checks each message again. It
// takes the same values WithStreamHeaders does, and fails Subscribe, naming
// the address, for another key.
func WithStreamProperties(props map[string]string) SubscribeOption {
	return func(c *subConfig) { c.filter.Properties = maps.Clone(props) }
}

// WithStreamSQL has a subscription to a Stream handle only the messages
// for which expr, an SQL filter expression, is TRUE: comparisons, AND, OR,
// NOT, arithmetic, LIKE, IN, IS NULL over header.priority,
// properties.FIELD (p.subject, p.group_id, p.creation_time ...) and the
// Headers (a.name, or the bare name), as RabbitMQ 4.2 and later evaluate
// it on the broker (amqp:sql-filter). The in-process broker evaluates the
// same subset. Subscribe fails, naming the address, for an address that
// is not a Stream, an expression that does not parse (with the column),
// one given with WithStreamHeaders or WithStreamProperties (RabbitMQ takes
// one kind), and, wrapping ErrNotSupported, on a broker without SQL
// filters (RabbitMQ before 4.2) or one that refuses the expression.
func WithStreamSQL(expr string) SubscribeOption {
	return func(c *subConfig) { c.filter.SQL = expr }
}

// PublishOption configures one publish.
type PublishOption func(*pubConfig)

type pubConfig struct{ settled bool }

// pubOptions applies opts. The options see a copy of their own, so that a
// publish without options does not move its config to the heap.
func pubOptions(opts []PublishOption) pubConfig {
	if len(opts) == 0 {
		return pubConfig{}
	}
	c := new(pubConfig)
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	return *c
}

// Settled publishes at-most-once: the transfer is pre-settled and Publish
// returns once it is written.
func Settled() PublishOption { return func(c *pubConfig) { c.settled = true } }
