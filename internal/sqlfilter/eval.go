package sqlfilter

import (
	"time"

	"github.com/amqpactor/amqpactor/messages"
)

// node is a compiled expression. eval returns a value, where NULL also
// stands for UNKNOWN: SQL's three-valued logic needs no more, since no
// operator tells the two apart (IS NULL takes an identifier only).
type node interface {
	eval(m *messages.Message) value
}

type (
	literal  struct{ v value }
	fieldRef struct {
		f   field
		key string
	}
	utcNow  struct{}
	notNode struct{ x node }
	andNode struct{ l, r node }
	orNode  struct{ l, r node }
	cmpNode struct {
		op   tokKind
		l, r node
	}
	arithNode struct {
		op   tokKind
		l, r node
	}
	signNode struct {
		minus bool
		x     node
	}
	inNode struct {
		x    node
		list []node
	}
	isNullNode struct{ x fieldRef }
	likeNode   struct {
		x node
		p *likePattern
	}
)

func (n literal) eval(*messages.Message) value    { return n.v }
func (n fieldRef) eval(m *messages.Message) value { return read(m, n.f, n.key) }
func (utcNow) eval(*messages.Message) value       { return intValue(time.Now().UnixMilli()) }

// NOT, AND and OR follow the tables of three-valued logic in the Jakarta
// Messaging spec (§ 3.8.1.2); a value that is not a boolean is UNKNOWN
// there, so "percentage OR TRUE" is TRUE.
func (n notNode) eval(m *messages.Message) value {
	switch v := n.x.eval(m); {
	case isTrue(v):
		return boolValue(false)
	case isFalse(v):
		return boolValue(true)
	}
	return null
}

func (n andNode) eval(m *messages.Message) value {
	l := n.l.eval(m)
	if isFalse(l) {
		return l
	}
	r := n.r.eval(m)
	switch {
	case isFalse(r):
		return r
	case isTrue(l) && isTrue(r):
		return l
	}
	return null
}

func (n orNode) eval(m *messages.Message) value {
	l := n.l.eval(m)
	if isTrue(l) {
		return l
	}
	r := n.r.eval(m)
	switch {
	case isTrue(r):
		return r
	case isFalse(l) && isFalse(r):
		return l
	}
	return null
}

func (n cmpNode) eval(m *messages.Message) value {
	return compare(n.op, n.l.eval(m), n.r.eval(m))
}

func (n arithNode) eval(m *messages.Message) value {
	return arith(n.op, n.l.eval(m), n.r.eval(m))
}

func (n signNode) eval(m *messages.Message) value {
	v := n.x.eval(m)
	switch {
	case !v.isNumber():
		return null
	case n.minus:
		return negate(v)
	}
	return v
}

// IN is UNKNOWN when its operand is NULL; otherwise it is TRUE when an item
// equals it (by =) and FALSE when none does, even if an item is NULL:
// RabbitMQ's choice.
func (n inNode) eval(m *messages.Message) value {
	v := n.x.eval(m)
	if v.k == kNull {
		return null
	}
	for _, e := range n.list {
		if w := e.eval(m); w.k != kNull && equal(v, w) {
			return boolValue(true)
		}
	}
	return boolValue(false)
}

func (n isNullNode) eval(m *messages.Message) value {
	return boolValue(n.x.eval(m).k == kNull)
}

// LIKE is UNKNOWN on anything but a string (or binary).
func (n likeNode) eval(m *messages.Message) value {
	v := n.x.eval(m)
	if v.k != kStr {
		return null
	}
	return n.p.match(v.s)
}
