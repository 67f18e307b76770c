package amqpactor

import (
	"context"
	"errors"
	"reflect"
	"sync"
)

// What an adapter says of itself.
//
// Responder, Typed and ActorHandler return a plain Handler (a func type, so
// users' own func(ctx, m) error handlers keep working), and Go gives a func
// value no room for anything else. So every adapter's Handler is a method
// value of one non-generic type, adapter, and runs the same code,
// (*adapter).handle. descriptorOf compares a Handler's code pointer
// (reflect.Value.Pointer) with that method's; only an adapter's matches, and
// only then is it called, with probe, a message no delivery ever is, which
// it answers with its descriptor instead of handling anything. A user's own
// func has code of its own and is never called. A handler wrapped in the
// user's middleware is another func: it has no descriptor and is described
// as an untyped handler.

// handlerKind is which adapter built a Handler.
type handlerKind uint8

const (
	kindFunc      handlerKind = iota // the user's own func
	kindResponder                    // Responder
	kindTyped                        // Typed
	kindActor                        // ActorHandler
	kindInvalid                      // an adapter made without a function
)

// handlerInfo is an adapter's descriptor.
type handlerInfo struct {
	kind    handlerKind
	payload reflect.Type // kindTyped: T
	invalid error        // kindInvalid: why Subscribe refuses it
}

// adapter is the Handler of Responder, Typed and ActorHandler: run is the
// adapting closure, info what descriptorOf reports of it.
type adapter struct {
	info handlerInfo
	run  Handler
}

// probe is the message that asks an adapter for its descriptor.
var probe = new(Message)

// describing is an adapter's answer to probe.
type describing struct{ info handlerInfo }

func (*describing) Error() string { return "amqpactor: a handler's descriptor" }

func (a *adapter) handle(ctx context.Context, m *Message) error {
	if m == probe {
		return &describing{info: a.info}
	}
	return a.run(ctx, m)
}

// adapterCode is the code every adapter's Handler runs.
var adapterCode = sync.OnceValue(func() uintptr { return reflect.ValueOf((&adapter{}).handle).Pointer() })

// withDescriptor returns h as an adapter described by info.
func withDescriptor(h Handler, info handlerInfo) Handler {
	return (&adapter{info: info, run: h}).handle
}

// descriptorOf is h's descriptor; the zero one (kindFunc) for a handler no
// adapter built.
func descriptorOf(h Handler) handlerInfo {
	if h == nil || reflect.ValueOf(h).Pointer() != adapterCode() {
		return handlerInfo{}
	}
	var d *describing
	if errors.As(h(context.Background(), probe), &d) {
		return d.info
	}
	return handlerInfo{}
}
