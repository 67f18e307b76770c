package amqpwire

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport"
)

// ReplyQueuePrefix starts the name of every private reply queue declared for
// a Dynamic receiver on RabbitMQ 4.
const ReplyQueuePrefix = "amqpactor.reply."

// topicExchangeType is the type of the exchange a Topic is declared as; see
// the package documentation.
const topicExchangeType = "topic"

// keysExchange holds the record of each durable subscription queue's
// binding keys, as one binding per queue from it to the queue: RabbitMQ 4
// lists a queue's bindings only by their key, so without the record the
// keys an earlier attach bound could not be found, nor removed. It is
// internal: nothing is ever published through it.
const keysExchange = "amqpactor.binding-keys"

// keysArgument is the argument of a record binding that lists the keys,
// one per line (a binding key holds no control character).
const keysArgument = "x-amqpactor-binding-keys"

// declareError names the address whose declaration failed.
func declareError(a string, err error) error {
	return &transport.LinkError{Address: a, Op: "attach", Err: fmt.Errorf("declare: %w", err)}
}

// ensureQueue declares a queue for a link. A queue that exists with other
// properties is used as it is (the broker answers 409): it may well have
// been declared on purpose with arguments of its own; but not a partition
// queue, whose single active consumer is what keeps its groups in order. A user without the
// configure permission (403) attaches to whatever is there: if the queue is
// missing, the refused attach names it.
func (c *Conn) ensureQueue(ctx context.Context, a string, q QueueSpec) error {
	if reserved(q.Name) {
		return nil
	}
	_, err := c.mgmt.DeclareQueue(ctx, q)
	switch {
	case err == nil:
		return nil
	case IsStatus(err, 409) && q.SingleActiveConsumer:
		// Used as it is, a partition queue without a single active
		// consumer would hand one group to several replicas at once.
		return declareError(a, fmt.Errorf("a partition queue needs x-single-active-consumer: %w", err))
	case IsStatus(err, 409):
		// RabbitMQ 4 names the first argument that differs ("inequivalent
		// arg 'x-dead-letter-exchange' … current is none"): dead letters and
		// other arguments are then the queue's own.
		c.log.Warn("amqpactor: queue exists with other properties; using it as it is",
			"queue", q.Name, "wanted", string(q.Type), "arguments", argNames(q.Arguments), "broker", err.Error())
		return nil
	case IsStatus(err, 403):
		c.log.Warn("amqpactor: not allowed to declare the queue; attaching to it as it is",
			"queue", q.Name, "broker", err.Error())
		return nil
	}
	return declareError(a, err)
}

// ensureExchange declares the exchange of a topic, with the same leniency
// as ensureQueue.
func (c *Conn) ensureExchange(ctx context.Context, a, name string) error {
	if reserved(name) {
		return nil
	}
	err := c.mgmt.DeclareExchange(ctx, ExchangeSpec{Name: name, Type: topicExchangeType})
	switch {
	case err == nil:
		return nil
	case IsStatus(err, 409):
		c.log.Warn("amqpactor: exchange exists with other properties; using it as it is",
			"exchange", name, "broker", err.Error())
		return nil
	case IsStatus(err, 403):
		c.log.Warn("amqpactor: not allowed to declare the exchange; attaching to it as it is",
			"exchange", name, "broker", err.Error())
		return nil
	}
	return declareError(a, err)
}

// reserved reports a name in RabbitMQ's "amq." namespace: those nodes are
// the broker's own and can never be declared (amq.topic, amq.fanout, …).
func reserved(name string) bool { return strings.HasPrefix(name, "amq.") }

// declareForSend declares the node a sender to a needs on RabbitMQ 4.
func (c *Conn) declareForSend(ctx context.Context, a address.Address) error {
	switch {
	case a.IsStream():
		return c.ensureQueue(ctx, a.String(), QueueSpec{Name: a.Name(), Type: Stream})
	case a.Kind() == address.KindQueue:
		return c.ensureQueue(ctx, a.String(), QueueSpec{Name: a.Name(), Type: Quorum, SingleActiveConsumer: a.SingleActiveConsumer()})
	case a.Kind() == address.KindTopic:
		return c.ensureExchange(ctx, a.String(), a.Name())
	}
	return nil
}

// declareForReceive declares the nodes a receiver needs on RabbitMQ 4.
func (c *Conn) declareForReceive(ctx context.Context, o transport.ReceiverOptions, node address.Node) error {
	a := o.Address
	switch a.Kind() {
	case address.KindQueue:
		if a.IsStream() {
			return c.declareStream(ctx, o)
		}
		typ := Quorum
		if o.ClassicQueue {
			typ = Classic
		}
		args, err := transport.ReceiveQueueArguments(o, typ == Quorum)
		if err != nil {
			return declareError(a.String(), err)
		}
		if dl := transport.DeadLetterQueue(o, typ == Quorum); dl != "" {
			// Before the queue: what it dead-letters must have somewhere to go.
			if err := c.ensureQueue(ctx, a.String(), QueueSpec{Name: dl, Type: Quorum}); err != nil {
				return err
			}
		}
		return c.ensureQueue(ctx, a.String(), QueueSpec{Name: a.Name(), Type: typ, Arguments: args, SingleActiveConsumer: a.SingleActiveConsumer()})
	case address.KindTopic:
		if err := c.ensureExchange(ctx, a.String(), node.Exchange); err != nil {
			return err
		}
		if o.Ephemeral {
			// An ephemeral subscription's queue lives as long as its link:
			// exclusive to this connection, deleted with its last consumer.
			if _, err := c.mgmt.DeclareQueue(ctx, QueueSpec{
				Name: node.Queue, Type: Classic, Transient: true, Exclusive: true, AutoDelete: true,
			}); err != nil {
				return declareError(a.String(), err)
			}
		} else {
			// A durable subscription's queue outlives every link: the
			// replicas that name it compete on it, and it keeps what is
			// published while all of them are down.
			typ := Quorum
			if o.ClassicQueue {
				typ = Classic
			}
			if err := c.ensureQueue(ctx, a.String(), QueueSpec{Name: node.Queue, Type: typ}); err != nil {
				return err
			}
		}
		if o.Ephemeral {
			// A fresh queue: nothing was bound to it before.
			for _, k := range o.BindingKeys.Keys() {
				if err := c.mgmt.Bind(ctx, Binding{Source: node.Exchange, Queue: node.Queue, Key: k}); err != nil {
					return declareError(a.String(), err)
				}
			}
			return nil
		}
		return c.bindKeys(ctx, a.String(), node, o.BindingKeys)
	}
	return nil
}

// declareStream declares the stream of a receiver, with the queue
// arguments it was given (x-max-length-bytes, x-max-age, …); a stream has
// no dead-lettering, which is refused naming the address.
func (c *Conn) declareStream(ctx context.Context, o transport.ReceiverOptions) error {
	a := o.Address
	if !o.DeadLetter.IsZero() || o.ClassicQueue {
		return declareError(a.String(), fmt.Errorf("a stream has neither dead-lettering nor a classic queue type"))
	}
	args, err := transport.QueueArguments(o.QueueArguments)
	if err != nil {
		return declareError(a.String(), err)
	}
	if t, ok := args["x-queue-type"]; ok && t != string(Stream) {
		return declareError(a.String(), fmt.Errorf("x-queue-type %v: a stream is of type stream", t))
	}
	delete(args, "x-queue-type")
	if len(args) == 0 {
		args = nil
	}
	return c.ensureQueue(ctx, a.String(), QueueSpec{Name: a.Name(), Type: Stream, Arguments: args})
}

// bindKeys binds a durable subscription queue to its topic with exactly
// keys: the keys its record says an earlier attach bound (none: "#", as a
// queue bound before there were keys) and that keys do not name are
// unbound, the new ones bound first, so a message that both sets match is
// never missed on the way. The record is written last; a change cut short
// before it is finished by the next attach.
func (c *Conn) bindKeys(ctx context.Context, a string, node address.Node, keys address.BindingKeys) error {
	records, err := c.mgmt.Bindings(ctx, keysExchange, node.Queue, node.Exchange)
	if err != nil {
		return declareError(a, fmt.Errorf("reading the binding keys of queue %s: %w", node.Queue, err))
	}
	want := keys.Keys()
	old := map[string]bool{}
	for _, r := range records {
		s, _ := r.Arguments[keysArgument].(string)
		for k := range strings.SplitSeq(s, "\n") {
			if k != "" {
				old[k] = true
			}
		}
	}
	if len(records) == 0 {
		old[address.MatchAll] = true
	}
	for _, k := range want {
		if err := c.mgmt.Bind(ctx, Binding{Source: node.Exchange, Queue: node.Queue, Key: k}); err != nil {
			return declareError(a, err)
		}
		delete(old, k)
	}
	for k := range old {
		if err := c.mgmt.Unbind(ctx, Binding{Source: node.Exchange, Queue: node.Queue, Key: k}); err != nil {
			return declareError(a, fmt.Errorf("removing binding key %q: %w", k, err))
		}
	}
	record := strings.Join(want, "\n")
	if keys.All() && len(records) == 0 {
		return nil // no record stands for "#"
	}
	if len(records) == 1 && records[0].Arguments[keysArgument] == record {
		return nil
	}
	if !keys.All() {
		if err := c.mgmt.DeclareExchange(ctx, ExchangeSpec{Name: keysExchange, Type: "direct", Internal: true}); err != nil && !IsStatus(err, 409) {
			return declareError(a, fmt.Errorf("recording the binding keys: %w", err))
		}
		if err := c.mgmt.Bind(ctx, Binding{Source: keysExchange, Queue: node.Queue, Key: node.Exchange,
			Arguments: map[string]any{keysArgument: record}}); err != nil {
			return declareError(a, fmt.Errorf("recording the binding keys: %w", err))
		}
	}
	for _, r := range records {
		if r.Arguments[keysArgument] == record || r.Location == "" {
			continue
		}
		if _, err := c.mgmt.Request(ctx, "DELETE", r.Location, nil); err != nil {
			return declareError(a, fmt.Errorf("removing the old record of the binding keys: %w", err))
		}
	}
	return nil
}

// declareReplyQueue declares a private reply queue and returns its address.
func (c *Conn) declareReplyQueue(ctx context.Context) (string, error) {
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	name := ReplyQueuePrefix + hex.EncodeToString(rnd[:])
	if _, err := c.mgmt.DeclareQueue(ctx, QueueSpec{
		Name: name, Type: Classic, Transient: true, Exclusive: true, AutoDelete: true,
	}); err != nil {
		return "", declareError("(dynamic)", err)
	}
	return "/queues/" + quote(name), nil
}

// argNames lists the keys of args, sorted, for a log line.
func argNames(args map[string]any) string {
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}
