package amqpwire

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport"
)

// anonymousRelay reports whether the peer takes transfers on the anonymous
// terminus: whether its open frame offered ANONYMOUS-RELAY, as RabbitMQ 4
// and Artemis do. A dialect's name is no promise: a peer that does not offer
// it gets dedicated links.
func (c *Conn) anonymousRelay() bool { return c.PeerOffers("ANONYMOUS-RELAY") }

// jmsDest is the message annotation by which Artemis routes a transfer on
// the anonymous terminus to a queue (0) or a topic (1).
const jmsDest = "x-opt-jms-dest"

// maxDeclared bounds the names a connection remembers having declared for
// the anonymous terminus; past it the memory starts afresh (a declaration
// is idempotent, so forgetting costs a round trip, never a message).
const maxDeclared = 4096

// errNoTo is returned by Send on the anonymous terminus for a message that
// names no destination.
var errNoTo = errors.New("a transfer on the anonymous terminus needs properties.to")

// Relay is a sender attached to the anonymous terminus. It implements
// transport.Relay.
type Relay struct {
	Sender
}

var _ transport.Relay = (*Relay)(nil)

// anonymousLabel names the anonymous terminus in errors.
const anonymousLabel = "(anonymous)"

func (s *Session) newRelay(ctx context.Context, mode amqp.SenderSettleMode) (transport.Sender, error) {
	// An empty target address is sent as null: the anonymous terminus.
	snd, err := s.s.NewSender(ctx, "", &amqp.SenderOptions{SettlementMode: &mode})
	if err != nil {
		return nil, s.conn.linkError(ctx, anonymousLabel, "attach", err)
	}
	return &Relay{Sender{s: snd, addr: "", conn: s.conn}}, nil
}

// Address is empty: the terminus has none.
func (r *Relay) Address() string { return "" }

// Send sends m to the node its properties.to names.
func (r *Relay) Send(ctx context.Context, m *amqp.Message, settled bool) (transport.Receipt, error) {
	if m == nil || m.Properties == nil || m.Properties.To == nil || *m.Properties.To == "" {
		return nil, &transport.LinkError{Address: anonymousLabel, Op: "send", Err: errNoTo}
	}
	return r.send(ctx, *m.Properties.To, m, settled)
}

// SendTo sends a copy of m to a: properties.to as the dialect spells a
// (/queues/NAME or /exchanges/NAME on RabbitMQ 4; the name, with the
// x-opt-jms-dest annotation for a queue or a topic, on Artemis). On
// RabbitMQ 4 a Queue or Topic is declared first, once per connection, as a
// named sender's would be, and on Artemis a partition queue; a Raw address
// (a reply-to) never is.
func (r *Relay) SendTo(ctx context.Context, a address.Address, m *amqp.Message, settled bool) (transport.Receipt, error) {
	if m == nil {
		return nil, fmt.Errorf("amqpactor: send to %s: nil message", a)
	}
	c := r.conn
	cp, err := addressed(c.dialect, a, m)
	if err != nil {
		return nil, err
	}
	if c.dialect == address.RabbitMQ4 && a.Kind() != address.KindRaw || c.dialect == address.Artemis && a.SingleActiveConsumer() {
		if err := c.declareOnce(ctx, a); err != nil {
			return nil, err
		}
	}
	return r.send(ctx, *cp.Properties.To, cp, settled)
}

// addressedMessage is the copy addressed makes: the message, its
// properties and the address they name, in one allocation.
type addressedMessage struct {
	msg   amqp.Message
	props amqp.MessageProperties
	to    string
}

// addressed returns a copy of m that names a as dialect d spells it on the
// anonymous terminus; m itself is not changed.
func addressed(d address.Dialect, a address.Address, m *amqp.Message) (*amqp.Message, error) {
	node, err := address.Render(d, a, address.Send, "")
	if err == nil {
		err = address.CheckStream(d, a)
	}
	if err != nil {
		return nil, err
	}
	am := &addressedMessage{msg: *m, to: node.Address}
	if m.Properties != nil {
		am.props = *m.Properties
	}
	if d == address.RabbitMQ4 && a.Kind() == address.KindTopic {
		am.to = byKey(node.Address, m)
	}
	am.props.To = &am.to
	am.msg.Properties = &am.props
	cp := &am.msg
	if d == address.Artemis && a.Kind() != address.KindRaw {
		ann := make(amqp.Annotations, len(m.Annotations)+1)
		maps.Copy(ann, m.Annotations)
		if a.Kind() == address.KindTopic {
			ann[jmsDest] = int8(1)
		} else {
			ann[jmsDest] = int8(0)
		}
		cp.Annotations = ann
	}
	return cp, nil
}

// byKey is the address on the anonymous terminus that routes m to the
// exchange at exchange (/exchanges/NAME) with its subject as the routing
// key: /exchanges/NAME/KEY, or the exchange itself (the empty key) for a
// message without one.
func byKey(exchange string, m *amqp.Message) string {
	if m.Properties == nil || m.Properties.Subject == nil || *m.Properties.Subject == "" {
		return exchange
	}
	return exchange + "/" + quote(*m.Properties.Subject)
}

// subjectSender publishes to a RabbitMQ 4 topic: its link is attached to
// the anonymous terminus, and each message is addressed to the topic's
// exchange with its subject as the routing key (byKey). Errors and
// receipts name the exchange.
type subjectSender struct {
	Sender
}

// Send sends a copy of m addressed by its subject; m itself is not changed.
func (s *subjectSender) Send(ctx context.Context, m *amqp.Message, settled bool) (transport.Receipt, error) {
	am := &addressedMessage{msg: *m, to: byKey(s.addr, m)}
	if m.Properties != nil {
		am.props = *m.Properties
	}
	am.props.To = &am.to
	am.msg.Properties = &am.props
	return s.Sender.Send(ctx, &am.msg, settled)
}

// send is Sender.Send with errors and receipts naming to.
func (r *Relay) send(ctx context.Context, to string, m *amqp.Message, settled bool) (transport.Receipt, error) {
	s := &r.Sender
	if settled {
		if err := s.s.Send(ctx, m, &amqp.SendOptions{Settled: true}); err != nil {
			return nil, s.conn.linkError(ctx, to, "send", err)
		}
		return nil, nil
	}
	rc, err := s.s.SendWithReceipt(ctx, m, nil)
	if err != nil {
		return nil, s.conn.linkError(ctx, to, "send", err)
	}
	return newReceipt(rc, to), nil
}

// declared remembers the nodes declared for the anonymous terminus.
type declared struct {
	mu    sync.Mutex
	names map[address.Address]struct{}
}

// declareOnce declares what a sender to a needs (declareForSend; on
// Artemis, an exclusive partition queue), unless this connection did so
// already.
func (c *Conn) declareOnce(ctx context.Context, a address.Address) error {
	c.declared.mu.Lock()
	_, done := c.declared.names[a]
	c.declared.mu.Unlock()
	if done {
		return nil
	}
	declare := c.declareForSend
	if c.dialect == address.Artemis {
		declare = c.ensureExclusive // only partition queues come here
	}
	if err := declare(ctx, a); err != nil {
		return err
	}
	c.declared.mu.Lock()
	if c.declared.names == nil || len(c.declared.names) >= maxDeclared {
		c.declared.names = make(map[address.Address]struct{})
	}
	c.declared.names[a] = struct{}{}
	c.declared.mu.Unlock()
	return nil
}
