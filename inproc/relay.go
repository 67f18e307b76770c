package inproc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/amqptypes"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// DestAnnotation is the message annotation that says which kind of node an
// anonymous-terminus transfer's properties.to names, as Artemis reads it:
// DestQueue or DestTopic. Without it the broker routes to the queue of that
// name if there is one, else to the topic of that name if there is one.
const DestAnnotation = "x-opt-jms-dest"

// Values of DestAnnotation.
const (
	DestQueue int8 = 0
	DestTopic int8 = 1
)

// errNoTo is what Send on the anonymous terminus returns for a message
// that names no destination.
var errNoTo = errors.New("a transfer on the anonymous terminus needs properties.to")

// relayLink is a sender attached to the anonymous terminus: every transfer
// is routed by its properties.to.
type relayLink struct {
	b     *Broker
	s     *session
	ended atomic.Pointer[error]
}

var _ transport.Relay = (*relayLink)(nil)

// released is the outcome of a transfer to a node that does not exist, as
// RabbitMQ 4 answers it on the anonymous terminus: that transfer only.
var released transport.Receipt = &receipt{o: messages.Outcome{Kind: messages.Released}}

func (s *session) newRelay(ctx context.Context, o transport.SenderOptions) (transport.Sender, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	ended, cause := s.ended, s.cause
	s.mu.Unlock()
	if ended {
		return nil, &transport.LinkError{Address: "(anonymous)", Op: "attach", Err: cause}
	}
	if s.c.b.cfg.noRelay {
		return nil, &transport.LinkError{Address: "(anonymous)", Op: "attach", Err: &amqp.LinkError{RemoteErr: &amqp.Error{
			Condition: amqp.ErrCondNotImplemented, Description: "inproc: this broker offers no anonymous relay",
		}}}
	}
	l := &relayLink{b: s.c.b, s: s}
	s.c.b.register(address.Address{}, l)
	if err := s.add(l); err != nil {
		s.c.b.unregister(address.Address{}, l)
		return nil, &transport.LinkError{Address: "(anonymous)", Op: "attach", Err: err}
	}
	return l, nil
}

// Address is empty: the terminus has no address.
func (l *relayLink) Address() string { return "" }

// Send routes m by its properties.to. A node that does not exist answers
// released for this transfer (a settled one is dropped); the link goes on.
func (l *relayLink) Send(ctx context.Context, m *amqp.Message, settled bool) (transport.Receipt, error) {
	if p := l.ended.Load(); p != nil {
		return nil, &transport.LinkError{Address: "(anonymous)", Op: "send", Err: *p}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if m == nil || m.Properties == nil || m.Properties.To == nil || *m.Properties.To == "" {
		return nil, &transport.LinkError{Address: "(anonymous)", Op: "send", Err: errNoTo}
	}
	a, ok := l.b.resolve(*m.Properties.To, m.Annotations[DestAnnotation])
	if !ok {
		if settled {
			return nil, nil
		}
		return released, nil
	}
	st, err := own(m)
	if err != nil {
		return nil, err
	}
	if rej := l.b.rejection(a); rej != nil {
		st.release()
		if settled {
			return nil, nil
		}
		return &receipt{o: messages.Outcome{Kind: messages.Rejected, Condition: string(rej.Condition), Description: rej.Description}}, nil
	}
	if a.Kind() == address.KindTopic {
		l.b.topic(a.Name()).publish(st)
	} else {
		l.b.route(a, st, nil)
	}
	st.release()
	if settled {
		return nil, nil
	}
	return accepted, nil
}

// SendTo sends a copy of m whose properties.to (and DestAnnotation, for a
// Queue or a Topic) name a.
func (l *relayLink) SendTo(ctx context.Context, a address.Address, m *amqp.Message, settled bool) (transport.Receipt, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("inproc: send to %s: nil message", a)
	}
	cp := *m
	var props amqp.MessageProperties
	if m.Properties != nil {
		props = *m.Properties
	}
	to := a.Name()
	props.To = &to
	if a.IsStream() {
		// Its transfers resolve to it only once it exists.
		l.b.stream(to)
	}
	cp.Properties = &props
	switch a.Kind() {
	case address.KindQueue, address.KindTopic:
		ann := make(amqp.Annotations, len(m.Annotations)+1)
		maps.Copy(ann, m.Annotations)
		if a.Kind() == address.KindTopic {
			ann[DestAnnotation] = DestTopic
		} else {
			ann[DestAnnotation] = DestQueue
		}
		cp.Annotations = ann
	}
	return l.Send(ctx, &cp, settled)
}

func (l *relayLink) Close(context.Context) error {
	l.end(&amqp.LinkError{})
	return nil
}

func (l *relayLink) end(cause error) {
	if l.ended.CompareAndSwap(nil, &cause) {
		l.b.unregister(address.Address{}, l)
		l.s.forget(l)
	}
}

// resolve finds the node an anonymous-terminus transfer names: the kind
// DestAnnotation gives, or the queue of that name, else the topic. It
// reports false when there is none. A topic is routed as a named sender's
// would be: to its subscriptions, none if it has none.
func (b *Broker) resolve(to string, dest any) (address.Address, bool) {
	kind := int8(-1)
	if d, ok := amqptypes.Int(dest); ok {
		kind = int8(d)
	}
	switch kind {
	case DestTopic:
		return address.Topic(to), true
	case DestQueue:
		if _, ok := b.streams.Load(to); ok {
			return address.Stream(to), true
		}
		return address.Queue(to), b.queue(to, false) != nil
	}
	if b.queue(to, false) != nil {
		return address.Queue(to), true
	}
	if _, ok := b.topics.Load(to); ok {
		return address.Topic(to), true
	}
	return address.Address{}, false
}
