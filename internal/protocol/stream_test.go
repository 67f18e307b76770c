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
	c := NewStreamCursor(address.StreamFirst(), nil, nil)
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
	c := NewStreamCursor(address.StreamNext(), nil, nil)
	c.Begin()
	start, _ := c.Begin()
	require.Equal(t, address.StreamNext(), start)
}

// Pre-settled transfers count as read when they arrive.
func TestStreamCursorSettledLink(t *testing.T) {
	c := NewStreamCursor(address.StreamFirst(), nil, nil)
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
	c := NewStreamCursor(address.StreamFirst(), []string{"eu", "us"}, nil)
	eu := &amqp.Message{Annotations: amqp.Annotations{FilterAnnotation: "eu"}}
	apac := &amqp.Message{Annotations: amqp.Annotations{FilterAnnotation: "apac"}}
	require.True(t, c.Wants(eu))
	require.False(t, c.Wants(apac))
	require.False(t, c.Wants(&amqp.Message{}), "a message without a value")
	require.True(t, NewStreamCursor(address.StreamFirst(), nil, nil).Wants(&amqp.Message{}))
}

// With application properties, a message must hold each with that value.
func TestStreamCursorWantsProperties(t *testing.T) {
	c := NewStreamCursor(address.StreamFirst(), nil, map[string]string{"region": "eu", "kind": "order"})
	m := func(props map[string]any) *amqp.Message { return &amqp.Message{ApplicationProperties: props} }
	require.True(t, c.Wants(m(map[string]any{"region": "eu", "kind": "order", "x": 1})))
	require.False(t, c.Wants(m(map[string]any{"region": "eu"})))
	require.False(t, c.Wants(m(map[string]any{"region": "us", "kind": "order"})))
	require.False(t, c.Wants(m(map[string]any{"region": 1, "kind": "order"})))
}
