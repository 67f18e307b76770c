package amqpactor

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

type descA struct{ A string }
type descB struct{ B string }

// TestDescriptorsAskOnlyAdapters: each adapter value carries its own
// descriptor, even where two instantiations of Typed share their code
// (pointer types have one GC shape), and answers the probe without running
// its function; a Handler no adapter built is never called.
func TestDescriptorsAskOnlyAdapters(t *testing.T) {
	called := false
	ta := Typed(func(context.Context, *descA, *Message) error { called = true; return nil })
	tb := Typed(func(context.Context, *descB, *Message) error { called = true; return nil })
	require.Equal(t, handlerInfo{kind: kindTyped, payload: reflect.TypeFor[*descA]()}, descriptorOf(ta))
	require.Equal(t, handlerInfo{kind: kindTyped, payload: reflect.TypeFor[*descB]()}, descriptorOf(tb))

	r := Responder(func(context.Context, *Message) (*Message, error) { called = true; return nil, nil })
	require.Equal(t, kindResponder, descriptorOf(r).kind)
	require.Equal(t, kindInvalid, descriptorOf(Typed[descA](nil)).kind)
	require.ErrorIs(t, descriptorOf(Responder(nil)).invalid, errNilResponder)

	// The user's own handler, and an adapter wrapped in middleware, are
	// plain funcs.
	own := Handler(func(context.Context, *Message) error { called = true; return nil })
	wrapped := Handler(func(ctx context.Context, m *Message) error { return ta(ctx, m) })
	require.Equal(t, handlerInfo{}, descriptorOf(own))
	require.Equal(t, handlerInfo{}, descriptorOf(wrapped))
	require.Equal(t, handlerInfo{}, descriptorOf(nil))
	require.False(t, called)

	// Subscribe refuses an adapter made without a function by its
	// descriptor.
	_, err := New(nil).Subscribe(Queue("q"), Typed[descA](nil))
	require.True(t, errors.Is(err, errNilTyped), "%v", err)
}
