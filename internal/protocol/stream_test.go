package protocol

import (
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
)

func at(off int64) *amqp.Message {
	return &amqp.Message{Annotations: amqp.Annotations{OffsetAnnotation: off}}
}

// The first link starts where the subscription says; a later one at the
// oldest offset not settled, and what was settled past it is reported
// handled once, when it comes again.
func TestStreamCursorResumesAtOldestUnsettled(t *testing.T) {
	c := NewStreamCursor(address.StreamFirst(), address.StreamFilter{})
	start, g1 := c.Begin()
	require.Equal(t, address.StreamFirst(), start)
	for off := int64(10); off < 15; off++ {
		require.False(t, c.Delivered(g1, at(off), false))
	}
	c.Settled(g1, at(10))
	c.Settled(g1, at(11))
	c.Settled(g1, at(13)) // 12 is still held
	start, g2 := c.Begin()
	require.Equal(t, address.StreamAt(12), start)
	c.Settled(g1, at(12)) // the old link's: not counted
	require.False(t, c.Delivered(g2, at(12), false))
	require.True(t, c.Delivered(g2, at(13), false), "13 was handled on the first link")
	require.False(t, c.Delivered(g2, at(14), false))
	c.Settled(g2, at(12))
	c.Settled(g2, at(14))
	start, _ = c.Begin()
	require.Equal(t, address.StreamAt(15), start)
}

// Nothing read: every link starts where the subscription says.
func TestStreamCursorBeforeAnyDelivery(t *testing.T) {
	c := NewStreamCursor(address.StreamNext(), address.StreamFilter{})
	c.Begin()
	start, _ := c.Begin()
	require.Equal(t, address.StreamNext(), start)
}

// Pre-settled transfers count as read when they arrive.
func TestStreamCursorSettledLink(t *testing.T) {
	c := NewStreamCursor(address.StreamFirst(), address.StreamFilter{})
	_, g := c.Begin()
	c.Delivered(g, at(0), true)
	c.Delivered(g, at(1), true)
	start, _ := c.Begin()
	require.Equal(t, address.StreamAt(2), start)
}

func TestOffsetTypes(t *testing.T) {
	for _, v := range []any{int64(7), uint64(7), int32(7), 7} {
		off, ok := Offset(&amqp.Message{Annotations: amqp.Annotations{OffsetAnnotation: v}})
		require.True(t, ok, "%T", v)
		require.Equal(t, int64(7), off)
	}
	_, ok := Offset(&amqp.Message{})
	require.False(t, ok)
}

// With filter values, only a message carrying one of them is wanted.
func TestStreamCursorWants(t *testing.T) {
	c := NewStreamCursor(address.StreamFirst(), address.StreamFilter{Values: []string{"eu", "us"}})
	eu := &amqp.Message{Annotations: amqp.Annotations{FilterAnnotation: "eu"}}
	apac := &amqp.Message{Annotations: amqp.Annotations{FilterAnnotation: "apac"}}
	require.True(t, c.Wants(eu))
	require.False(t, c.Wants(apac))
	require.False(t, c.Wants(&amqp.Message{}), "a message without a value")
	require.True(t, NewStreamCursor(address.StreamFirst(), address.StreamFilter{}).Wants(&amqp.Message{}))
}

// With application properties, a message must hold each with that value.
func TestStreamCursorWantsProperties(t *testing.T) {
	c := NewStreamCursor(address.StreamFirst(), address.StreamFilter{Headers: map[string]string{"region": "eu", "kind": "order"}})
	m := func(props map[string]any) *amqp.Message { return &amqp.Message{ApplicationProperties: props} }
	require.True(t, c.Wants(m(map[string]any{"region": "eu", "kind": "order", "x": 1})))
	require.False(t, c.Wants(m(map[string]any{"region": "eu"})))
	require.False(t, c.Wants(m(map[string]any{"region": "us", "kind": "order"})))
	require.False(t, c.Wants(m(map[string]any{"region": 1, "kind": "order"})))
}

// With properties, a message's properties section must hold each, by the
// field's AMQP name; an id that is not a string never matches, and an SQL
// filter is left to the broker.
func TestStreamCursorWantsSectionProperties(t *testing.T) {
	c := NewStreamCursor(address.StreamFirst(), address.StreamFilter{
		Properties: map[string]string{"subject": "orders.new", "message-id": "m1", "user-id": "bob"},
		SQL:        "n > 100",
	})
	s := func(v string) *string { return &v }
	m := func(subject *string, id any, user []byte) *amqp.Message {
		return &amqp.Message{Properties: &amqp.MessageProperties{Subject: subject, MessageID: id, UserID: user}}
	}
	require.True(t, c.Wants(m(s("orders.new"), "m1", []byte("bob"))))
	require.False(t, c.Wants(m(s("orders.old"), "m1", []byte("bob"))))
	require.False(t, c.Wants(m(nil, "m1", []byte("bob"))), "no subject")
	require.False(t, c.Wants(m(s("orders.new"), uint64(1), []byte("bob"))), "a ulong id")
	require.False(t, c.Wants(m(s("orders.new"), "m1", nil)), "no user-id")
	require.False(t, c.Wants(&amqp.Message{}), "no properties")
	for _, k := range address.StreamFilterFields {
		_, ok := PropertyString(&amqp.MessageProperties{}, k)
		require.False(t, ok, "%s of empty properties", k)
	}
	all := &amqp.MessageProperties{MessageID: "1", CorrelationID: "2", UserID: []byte("3"), To: s("4"), Subject: s("5"),
		ReplyTo: s("6"), ContentType: s("7"), ContentEncoding: s("8"), GroupID: s("9"), ReplyToGroupID: s("10")}
	seen := map[string]bool{}
	for _, k := range address.StreamFilterFields {
		v, ok := PropertyString(all, k)
		require.True(t, ok, k)
		require.False(t, seen[v], "%s reads its own field", k)
		seen[v] = true
	}
}
