package address

import (
	"net/url"
	"strings"
)

// Dialect says how a broker spells addresses. The zero value is Artemis.
type Dialect uint8

const (
	// Artemis: address names with the queue/topic capabilities; FQQN supported.
	Artemis Dialect = iota
	// RabbitMQ4: the v2 address format /queues/NAME and /exchanges/NAME.
	RabbitMQ4
	// ServiceBus: entity paths; topic subscriptions are TOPIC/subscriptions/NAME.
	ServiceBus
)

func (d Dialect) String() string {
	switch d {
	case Artemis:
		return "Artemis"
	case RabbitMQ4:
		return "RabbitMQ4"
	case ServiceBus:
		return "ServiceBus"
	}
	return "unknown"
}

// Role says which end of a link an address is rendered for; a topic is spelt
// differently for a publisher and for a subscriber on some brokers.
type Role uint8

const (
	// Send renders a link target.
	Send Role = iota
	// Receive renders a link source.
	Receive
)

// Node is an address as it goes on the wire: the terminus address and the
// capabilities to ask for.
type Node struct {
	Address      string
	Capabilities []string
	// Queue is set when the dialect needs a queue declared before the link
	// attaches (RabbitMQ4 topic subscriptions); Exchange is what it binds to.
	Queue    string
	Exchange string
	// Durable asks the peer to keep the source node after the link ends
	// (terminus durability unsettled-state, expiry-policy never): an
	// Artemis shared durable subscription.
	Durable bool
	// LinkName, when set, is the name the link must attach with: Artemis
	// names a durable subscription's queue after it.
	LinkName string
	// Exclusive is set when the queue Address names must be exclusive
	// (one consumer at a time) before a link attaches: an Artemis
	// partition queue, which the transport creates or updates so.
	Exclusive bool
}

var (
	capQueue = []string{"queue"}
	capTopic = []string{"topic"}
	// capShared asks Artemis for a subscription queue shared by every
	// receiver attaching with the same name, from any connection (global).
	capShared = []string{"topic", "shared", "global"}
)

// Render spells a for dialect d. subscription names the subscriber's own node
// when a topic is received: a durable node shared by every receiver that
// names it (RabbitMQ4 queue TOPIC.SUBSCRIPTION, Artemis queue SUBSCRIPTION of
// the topic's address, ServiceBus subscription). On Artemis an empty
// subscription is a private node per link. RenderEphemeral spells the
// private node of an ephemeral subscription instead.
func Render(d Dialect, a Address, role Role, subscription string) (Node, error) {
	return render(d, a, role, subscription, false)
}

// RenderEphemeral spells the source of an ephemeral topic subscription: a
// node of the subscriber's own that lives as long as its link (RabbitMQ4: the
// queue TOPIC.SUBSCRIPTION, declared exclusive and auto-delete; Artemis: the
// topic's address, a private queue per link). Other addresses are spelt as
// Render spells them.
func RenderEphemeral(d Dialect, a Address, subscription string) (Node, error) {
	return render(d, a, Receive, subscription, true)
}

func render(d Dialect, a Address, role Role, subscription string, ephemeral bool) (Node, error) {
	if err := a.Validate(); err != nil {
		e := err.(*Error)
		e.Dialect = d
		return Node{}, e
	}
	if a.kind == KindRaw {
		return Node{Address: a.name}, nil
	}
	if a.kind == KindPartitioned {
		// Its partition queues are what goes on the wire; they all spell
		// alike, so the first answers for the set.
		n, err := Render(d, a.Partition(0), role, subscription)
		if e, ok := err.(*Error); ok {
			e.Address = a
		}
		return n, err
	}
	_, _, fq := a.FQQN()
	switch d {
	case Artemis:
		if a.kind == KindQueue && a.single {
			// Artemis applies no exclusive=true address parameter over
			// AMQP, and a sender's attach auto-creates a plain queue: both
			// ends have the queue made exclusive first.
			return Node{Address: a.name, Capabilities: capQueue, Exclusive: true}, nil
		}
		if a.kind == KindQueue {
			return Node{Address: a.name, Capabilities: capQueue}, nil
		}
		if role == Send || ephemeral || subscription == "" {
			return Node{Address: a.name, Capabilities: capTopic}, nil
		}
		if strings.Contains(subscription, "::") {
			return Node{}, &Error{Address: a, Dialect: d, Reason: "subscription name may not contain '::'"}
		}
		// The fully qualified name attaches to the subscription queue as
		// to a queue, so closing the link never deletes it.
		return Node{Address: a.name + "::" + subscription, Capabilities: capShared, Durable: true, LinkName: subscription}, nil
	case RabbitMQ4:
		if fq {
			return Node{}, &Error{Address: a, Dialect: d, Reason: "fully qualified queue names are an Artemis feature"}
		}
		if a.kind == KindQueue {
			return Node{Address: "/queues/" + url.PathEscape(a.name)}, nil
		}
		if role == Send {
			return Node{Address: "/exchanges/" + url.PathEscape(a.name)}, nil
		}
		if subscription == "" {
			return Node{}, &Error{Address: a, Dialect: d, Reason: "a topic subscription needs a subscription name"}
		}
		q := a.name + "." + subscription
		return Node{Address: "/queues/" + url.PathEscape(q), Queue: q, Exchange: a.name}, nil
	case ServiceBus:
		if fq {
			return Node{}, &Error{Address: a, Dialect: d, Reason: "fully qualified queue names are an Artemis feature"}
		}
		if a.single && role == Receive {
			return Node{}, &Error{Address: a, Dialect: d, Reason: "Service Bus queues have no single active consumer (use session-enabled queues)"}
		}
		if a.kind == KindTopic && role == Receive {
			if subscription == "" {
				return Node{}, &Error{Address: a, Dialect: d, Reason: "a topic subscription needs a subscription name"}
			}
			if strings.Contains(subscription, "/") {
				return Node{}, &Error{Address: a, Dialect: d, Reason: "subscription name may not contain '/'"}
			}
			return Node{Address: a.name + "/subscriptions/" + subscription}, nil
		}
		return Node{Address: a.name}, nil
	}
	return Node{}, &Error{Address: a, Dialect: d, Reason: "unknown dialect"}
}
