package amqp091

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/Azure/go-amqp"
	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/internal/values"
)

// DirectReplyTo is RabbitMQ's pseudo-queue for direct reply-to.
const DirectReplyTo = "amq.rabbitmq.reply-to"

// route is where a publish goes: an exchange and a routing key.
type route struct {
	exchange, key string
	// passive: the exchange is not ours to declare (a Raw address): it is
	// checked to exist instead, so a publish never closes the channel.
	passive bool
	// bySubject: a topic, routed by each message's subject, as RabbitMQ 4
	// routes an AMQP 1.0 message sent to /exchanges/NAME.
	bySubject bool
}

// forMessage is r for the message m: a topic's routing key is its
// subject, which 0-9-1 carries as a short string.
func (r route) forMessage(m *amqp.Message) (route, error) {
	if !r.bySubject || m.Properties == nil || m.Properties.Subject == nil {
		return r, nil
	}
	r.key = *m.Properties.Subject
	if len(r.key) > address.MaxBindingKey {
		return r, fmt.Errorf("the subject routes a topic and may be at most %d bytes over AMQP 0-9-1", address.MaxBindingKey)
	}
	return r, nil
}

// sendRoute spells a for basic.publish: a queue through the default
// exchange, a topic as its exchange with each message's subject as the
// routing key, a raw
// address as "exchange/routing-key" (also RabbitMQ 4's "/queues/NAME"
// and "/exchanges/NAME[/KEY]"; a name without '/' is a queue, as is a
// direct reply-to address).
func sendRoute(a address.Address) (route, error) {
	if _, err := address.Render(address.RabbitMQ4, a, address.Send, ""); err != nil {
		return route{}, err
	}
	if a.IsStream() {
		return route{}, noStreams(a)
	}
	switch a.Kind() {
	case address.KindQueue:
		return route{key: a.Name()}, nil
	case address.KindTopic:
		return route{exchange: a.Name(), bySubject: true}, nil
	}
	return rawRoute(a.Name()), nil
}

func rawRoute(name string) route {
	switch {
	case strings.HasPrefix(name, DirectReplyTo):
		return route{key: name}
	case strings.HasPrefix(name, "/queues/"):
		return route{key: unescapePath(strings.TrimPrefix(name, "/queues/"))}
	case strings.HasPrefix(name, "/exchanges/"):
		ex, key, _ := strings.Cut(strings.TrimPrefix(name, "/exchanges/"), "/")
		return route{exchange: unescapePath(ex), key: unescapePath(key), passive: true}
	}
	ex, key, ok := strings.Cut(name, "/")
	if !ok {
		return route{key: name}
	}
	return route{exchange: ex, key: key, passive: true}
}

func unescapePath(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}

func (r route) String() string { return r.exchange + "/" + r.key }

// declareError names the address whose declaration failed.
func declareError(a string, err error) error {
	return &transport.LinkError{Address: a, Op: "attach", Err: fmt.Errorf("declare: %w", err)}
}

// declare runs f on a channel of its own, so that a refusal (which closes
// the channel in AMQP 0-9-1) never ends a channel in use.
func (c *Conn) declare(ctx context.Context, f func(ch *rmq.Channel) error) error {
	ch, err := c.channel(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	err = c.call(ctx, ch, func() error { return f(ch) })
	var re *rmq.Error
	if errors.As(err, &re) && re.Server && !connectionLevel(re.Code) {
		// The broker refused the declaration, closing only the channel
		// opened for it: a refusal (actors.Refused), not a lost session.
		return &wrapped{text: fmt.Sprintf("%d %s", re.Code, re.Reason), base: remoteError(re), err: re}
	}
	return err
}

// code is the broker's reply code in err, 0 when there is none.
func code(err error) int {
	var re *rmq.Error
	if errors.As(err, &re) {
		return re.Code
	}
	return 0
}

// queueSpec is one queue to declare.
type queueSpec struct {
	name       string
	quorum     bool
	transient  bool // exclusive and auto-delete too
	args       rmq.Table
	sac        bool
	bindTo     string   // an exchange to bind it to with keys
	keys       []string // the binding keys of bindTo
	exchangeOf string   // the topic exchange to declare first
}

// ensureQueue declares q. A queue that exists with other properties is
// used as it is (the broker answers 406), as on amqpwire, but not a
// partition queue: its single active consumer is what keeps its groups in
// order. A user without the configure permission (403) consumes from
// whatever is there.
func (c *Conn) ensureQueue(ctx context.Context, a string, q queueSpec) error {
	_, err := c.declareQueue(ctx, a, q)
	return err
}

// declareQueue is ensureQueue, which also says whether the queue is as q
// asks: false when it existed with other properties or was not ours to
// declare.
func (c *Conn) declareQueue(ctx context.Context, a string, q queueSpec) (bool, error) {
	if strings.HasPrefix(q.name, "amq.") {
		return false, nil
	}
	key := "q\x00" + q.name + "\x00" + fmt.Sprint(q.quorum, q.sac, sortedArgs(q.args), q.bindTo, q.keys)
	if asked, ok := c.declared.Load(key); ok && !q.transient {
		return asked.(bool), nil
	}
	if q.exchangeOf != "" {
		if err := c.ensureExchange(ctx, a, q.exchangeOf); err != nil {
			return false, err
		}
	}
	args := rmq.Table{}
	for k, v := range q.args {
		args[k] = v
	}
	if !q.transient {
		if q.quorum {
			args["x-queue-type"] = "quorum"
		} else {
			args["x-queue-type"] = "classic"
		}
	}
	if q.sac {
		args["x-single-active-consumer"] = true
	}
	err := c.declare(ctx, func(ch *rmq.Channel) error {
		if _, err := ch.QueueDeclare(q.name, !q.transient, q.transient, false, false, args); err != nil {
			return err
		}
		for _, k := range q.keys {
			if err := ch.QueueBind(q.name, k, q.bindTo, false, nil); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case err == nil:
		c.declared.Store(key, true)
		return true, nil
	case code(err) == rmq.PreconditionFailed && q.sac:
		return false, declareError(a, fmt.Errorf("a partition queue needs x-single-active-consumer: %w", err))
	case code(err) == rmq.PreconditionFailed:
		c.c.log.Warn("amqpactor: queue exists with other properties; using it as it is",
			"queue", q.name, "broker", err.Error())
		c.declared.Store(key, false)
		return false, nil
	case code(err) == rmq.AccessRefused:
		c.c.log.Warn("amqpactor: not allowed to declare the queue; consuming from it as it is",
			"queue", q.name, "broker", err.Error())
		return false, nil
	}
	return false, declareError(a, err)
}

// ensureExchange declares the topic exchange name, with the same leniency
// as ensureQueue.
func (c *Conn) ensureExchange(ctx context.Context, a, name string) error {
	if name == "" || strings.HasPrefix(name, "amq.") {
		return nil
	}
	key := "x\x00" + name
	if _, ok := c.declared.Load(key); ok {
		return nil
	}
	err := c.declare(ctx, func(ch *rmq.Channel) error {
		return ch.ExchangeDeclare(name, "topic", true, false, false, false, nil)
	})
	switch {
	case err == nil, code(err) == rmq.PreconditionFailed:
		if err != nil {
			c.c.log.Warn("amqpactor: exchange exists with other properties; using it as it is",
				"exchange", name, "broker", err.Error())
		}
		c.declared.Store(key, true)
		return nil
	case code(err) == rmq.AccessRefused:
		c.c.log.Warn("amqpactor: not allowed to declare the exchange; publishing to it as it is",
			"exchange", name, "broker", err.Error())
		return nil
	}
	return declareError(a, err)
}

// checkExchange makes sure a raw address's exchange exists: publishing to
// a missing one would close the channel, and every sender on it with it.
func (c *Conn) checkExchange(ctx context.Context, a, name string) error {
	if name == "" {
		return nil
	}
	err := c.declare(ctx, func(ch *rmq.Channel) error {
		return ch.ExchangeDeclarePassive(name, "topic", true, false, false, false, nil)
	})
	if err != nil {
		return &transport.LinkError{Address: a, Op: "attach", Err: err}
	}
	return nil
}

// declareForSend declares what a publish to a needs.
func (c *Conn) declareForSend(ctx context.Context, a address.Address, r route) error {
	switch a.Kind() {
	case address.KindQueue:
		return c.ensureQueue(ctx, a.String(), queueSpec{name: a.Name(), quorum: true, sac: a.SingleActiveConsumer()})
	case address.KindTopic:
		return c.ensureExchange(ctx, a.String(), a.Name())
	}
	if r.passive {
		return c.checkExchange(ctx, a.String(), r.exchange)
	}
	return nil
}

// receiveQueue declares the queue a receiver consumes from and returns its
// name, and whether it is known to be a quorum queue (declared as one by
// this connection), whose x-delivery-count header on a redelivery is the
// broker's own.
func (c *Conn) receiveQueue(ctx context.Context, o transport.ReceiverOptions) (string, bool, error) {
	a := o.Address
	node, err := address.Render(address.RabbitMQ4, a, address.Receive, o.Subscription)
	if err == nil && a.IsStream() {
		err = noStreams(a)
	}
	if err != nil {
		return "", false, err
	}
	switch a.Kind() {
	case address.KindQueue:
		quorum := !o.ClassicQueue
		args, err := queueArguments(o, quorum)
		if err != nil {
			return "", false, declareError(a.String(), err)
		}
		if dl := transport.DeadLetterQueue(o, quorum); dl != "" {
			if err := c.ensureQueue(ctx, a.String(), queueSpec{name: dl, quorum: true}); err != nil {
				return "", false, err
			}
		}
		asked, err := c.declareQueue(ctx, a.String(), queueSpec{name: a.Name(), quorum: quorum, args: args, sac: a.SingleActiveConsumer()})
		return a.Name(), quorum && asked, err
	case address.KindTopic:
		// The subscription queue lives as long as the subscription: it is
		// exclusive to this connection and deleted with its consumer, so
		// its bindings are always the keys it is declared with now.
		return node.Queue, false, c.ensureQueue(ctx, a.String(), queueSpec{name: node.Queue, transient: true,
			bindTo: node.Exchange, keys: o.BindingKeys.Keys(), exchangeOf: node.Exchange})
	}
	// A raw source is a queue name (or RabbitMQ 4's "/queues/NAME"), which
	// must exist: it is not ours to declare, and its type is not known.
	q := unescapePath(strings.TrimPrefix(a.Name(), "/queues/"))
	if strings.HasPrefix(q, "amq.") {
		return q, false, nil
	}
	if err := c.declare(ctx, func(ch *rmq.Channel) error {
		_, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
		return err
	}); err != nil {
		return "", false, &transport.LinkError{Address: q, Op: "attach", Err: err}
	}
	return q, false, nil
}

// queueArguments are the x-arguments of a receiver's queue, as on
// amqpwire (transport.ReceiveQueueArguments), as amqp091-go's table.
func queueArguments(o transport.ReceiverOptions, quorum bool) (rmq.Table, error) {
	args, err := transport.ReceiveQueueArguments(o, quorum)
	if err != nil {
		return nil, err
	}
	return values.Map(rmq.Table{}, args, "queue argument", headerValue)
}

func sortedArgs(t rmq.Table) string {
	keys := make([]string, 0, len(t))
	for k, v := range t {
		keys = append(keys, fmt.Sprintf("%s=%v", k, v))
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}
