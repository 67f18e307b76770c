package amqpactor

import (
	"reflect"
	"runtime"
	"sync"
	"unsafe"
	"weak"
)

// What an adapter says of itself.
//
// Responder, Typed and ActorHandler return a plain Handler (a func type, so
// users' own func(ctx, m) error handlers keep working), and Go gives a func
// value no room for anything else: a value of another named func type would
// not be assignable to Handler, and a conversion drops its methods. So each
// adapter records its descriptor when it is built, in a side table keyed by
// the closure it returns (the object a func value points to), and Subscribe
// and AsyncAPI read it there without calling the handler. A closure's code
// pointer would not do: the closures of Typed[A] and Typed[B] share their
// code when A and B have one GC shape. Entries are held weakly and go when
// their adapter is collected, so building adapters in a loop leaks nothing.
// A handler wrapped in the user's middleware is another closure: it has no
// descriptor and is described as an untyped handler.

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

// describedHandler is an entry of the side table. self tells the adapter's
// own entry from a stale one of a collected closure that had the same
// address.
type describedHandler struct {
	info handlerInfo
	self weak.Pointer[byte]
}

var descriptors sync.Map // closure address (uintptr) -> *describedHandler

// closureOf is the object h points to: one per closure a call of an adapter
// makes, since each captures the function (or actor) it adapts.
func closureOf(h Handler) *byte {
	return *(**byte)(unsafe.Pointer(&h))
}

// withDescriptor records info as h's descriptor and returns h. h must be a
// closure that captures something, so that it is a heap object of its own.
func withDescriptor(h Handler, info handlerInfo) Handler {
	p := closureOf(h)
	e := &describedHandler{info: info, self: weak.Make(p)}
	key := uintptr(unsafe.Pointer(p))
	descriptors.Store(key, e)
	runtime.AddCleanup(p, func(key uintptr) { descriptors.CompareAndDelete(key, e) }, key)
	return h
}

// descriptorOf is h's descriptor; the zero one (kindFunc) for a handler no
// adapter built.
func descriptorOf(h Handler) handlerInfo {
	if h == nil {
		return handlerInfo{}
	}
	p := closureOf(h)
	v, ok := descriptors.Load(uintptr(unsafe.Pointer(p)))
	if !ok {
		return handlerInfo{}
	}
	e := v.(*describedHandler)
	if e.self.Value() != p {
		return handlerInfo{}
	}
	return e.info
}
