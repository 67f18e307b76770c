package amqptypes

import (
	"fmt"
	"reflect"

	amqp "github.com/Azure/go-amqp"
)

// Rules are what a caller accepts on top of what go-amqp can encode.
type Rules struct {
	// Compound allows lists, maps and arrays; AMQP forbids them in
	// application-properties.
	Compound bool
	// Pointers allows pointers to accepted types, checked as what they
	// point to; go-amqp encodes them as that value.
	Pointers bool
	// TimeRange refuses timestamps outside MinTime to MaxTime, which
	// go-amqp would wrap silently.
	TimeRange bool
	// MaxDepth bounds the nesting of lists and maps (and stops a list that
	// contains itself, which go-amqp would recurse into forever).
	MaxDepth int
}

// Wire accepts what go-amqp's encoder accepts, for the in-process broker,
// which must refuse exactly what a real connection would.
var Wire = Rules{Compound: true, Pointers: true, MaxDepth: 100}

// Why a value is refused; each is followed by the value (or element) at
// fault when it is reported.
const (
	reasonUTF8    = "invalid UTF-8 in"
	reasonTime    = "timestamp out of range in"
	reasonFlat    = "maps, lists and arrays are not allowed in application-properties, got"
	reasonDepth   = "nesting too deep at"
	reasonType    = "unsupported type"
	reasonAnnKey  = "unsupported annotations key type"
	reasonNil     = "nil"
	reasonEncoder = "go-amqp cannot encode"
)

// Check reports whether v can go on the wire under r, at nesting depth
// depth (0 for a value of a section). It returns why v, or the element bad
// inside it, cannot be sent, or "" when it can. It does not allocate.
func Check(v any, r Rules, depth int) (reason string, bad any) {
	row := Lookup(v)
	switch row.Kind {
	case Scalar, Binary:
		if row.valid != nil {
			return row.valid(v, r)
		}
		return "", nil
	}
	if !r.Compound {
		switch row.Kind {
		case List, Map, Array:
			return reasonFlat, v
		}
		return checkOther(v, row, r, depth)
	}
	if depth >= r.MaxDepth {
		return reasonDepth, v
	}
	depth++
	switch row.Kind {
	case List:
		for _, e := range v.([]any) {
			if reason, bad := Check(e, r, depth); reason != "" {
				return reason, bad
			}
		}
		return "", nil
	case Map:
		return checkMap(v, r, depth)
	case Array:
		if row.valid != nil {
			return row.valid(v, r)
		}
		if t, ok := v.([]map[any]any); ok {
			for _, m := range t {
				if reason, bad := checkMap(m, r, depth); reason != "" {
					return reason, bad
				}
			}
		}
		return "", nil
	}
	return checkOther(v, row, r, depth)
}

// checkMap checks the keys and values of a value of a Map row.
func checkMap(v any, r Rules, depth int) (string, any) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if reason, bad := validString(k, r); reason != "" {
				return reason, bad
			}
			if reason, bad := Check(e, r, depth); reason != "" {
				return reason, bad
			}
		}
	case map[any]any:
		for k, e := range t {
			if reason, bad := Check(k, r, depth); reason != "" {
				return reason, bad
			}
			if reason, bad := Check(e, r, depth); reason != "" {
				return reason, bad
			}
		}
	case map[amqp.Symbol]any:
		for _, e := range t {
			if reason, bad := Check(e, r, depth); reason != "" {
				return reason, bad
			}
		}
	case amqp.Annotations:
		for k, e := range t {
			if _, ok := AnnotationKey(k); !ok {
				return reasonAnnKey, k
			}
			if reason, bad := Check(e, r, depth); reason != "" {
				return reason, bad
			}
		}
	}
	return "", nil
}

// checkOther checks the kinds the table does not name: go-amqp's own types,
// which it dereferences when they are pointers, and pointers to accepted
// types. This is the cold path.
func checkOther(v any, row *Row, r Rules, depth int) (string, any) {
	switch row.Kind {
	case Described:
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
			return reasonNil, v
		}
		return "", nil
	case Pointer:
		if !r.Pointers {
			break
		}
		rv := reflect.ValueOf(v)
		if rv.IsNil() {
			return reasonNil, v
		}
		return Check(rv.Elem().Interface(), r, depth)
	}
	return reasonType, v
}

// Refusal is the error of a value that cannot go on the wire.
type Refusal struct {
	Reason string
	Bad    any // the value or element at fault
}

func (e *Refusal) Error() string { return fmt.Sprintf("%s %T", e.Reason, e.Bad) }

// Copier checks values under Rules and copies them as go-amqp's decoder
// would hand them to a receiver: int as int64, uint as uint64, a symbol as
// a string, amqp.Null as nil, a time in whole milliseconds, a pointer as
// what it points to, a map with only string keys as a map[string]any, an
// empty list as nil (each row's Decoded). The common types are copied here;
// arrays and go-amqp's own types take a trip through its codec, which is
// exact.
type Copier struct {
	Rules Rules
	// Deep is set once a copied value holds something a receiver could
	// change in place (a []byte, list, map or array).
	Deep bool
}

// Value returns the copy of v, at nesting depth depth, or why it cannot be
// sent.
func (c *Copier) Value(v any, depth int) (any, error) {
	row := Lookup(v)
	switch row.Kind {
	case Scalar:
		if row.valid != nil {
			if reason, bad := row.valid(v, c.Rules); reason != "" {
				return nil, &Refusal{reason, bad}
			}
		}
		return row.Norm(v), nil
	case Binary:
		c.Deep = true
		t := v.([]byte)
		return append(make([]byte, 0, len(t)), t...), nil
	}
	if !c.Rules.Compound {
		switch row.Kind {
		case List, Map, Array:
			return nil, &Refusal{reasonFlat, v}
		}
	}
	if depth >= c.Rules.MaxDepth {
		return nil, &Refusal{reasonDepth, v}
	}
	switch row.Kind {
	case List:
		c.Deep = true
		t := v.([]any)
		if len(t) == 0 {
			return []any(nil), nil
		}
		out := make([]any, len(t))
		for i, e := range t {
			var err error
			if out[i], err = c.Value(e, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case Map:
		return c.copyMap(v, depth)
	case Pointer:
		if !c.Rules.Pointers {
			break
		}
		rv := reflect.ValueOf(v)
		if rv.IsNil() {
			return nil, &Refusal{reasonNil, v}
		}
		return c.Value(rv.Elem().Interface(), depth+1)
	case Array, Described:
		if reason, bad := Check(v, c.Rules, depth); reason != "" {
			return nil, &Refusal{reason, bad}
		}
		c.Deep = true
		return ViaCodec(v)
	}
	return nil, &Refusal{reasonType, v}
}

// copyMap copies a value of a Map row.
func (c *Copier) copyMap(v any, depth int) (any, error) {
	c.Deep = true
	switch t := v.(type) {
	case map[string]any:
		if len(t) == 0 {
			return map[any]any{}, nil
		}
		out := make(map[string]any, len(t))
		for k, e := range t {
			if reason, bad := validString(k, c.Rules); reason != "" {
				return nil, &Refusal{reason, bad}
			}
			var err error
			if out[k], err = c.Value(e, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[any]any:
		return c.anyMap(t, depth, false)
	case amqp.Annotations:
		return c.anyMap(t, depth, true)
	case map[amqp.Symbol]any:
		m := make(map[any]any, len(t))
		for k, e := range t {
			m[k] = e
		}
		return c.anyMap(m, depth, false)
	}
	return nil, &Refusal{reasonType, v}
}

// anyMap copies a map with keys of any type (the keys of annotations when
// ann is set); like go-amqp's decoder it returns a map[string]any when every
// key is a string or symbol.
func (c *Copier) anyMap(t map[any]any, depth int, ann bool) (any, error) {
	out := make(map[any]any, len(t))
	strKeys := true
	for k, e := range t {
		var kk any
		var err error
		if ann {
			var ok bool
			if kk, ok = AnnotationKey(k); !ok {
				return nil, &Refusal{reasonAnnKey, k}
			}
		} else if kk, err = c.Value(k, depth+1); err != nil {
			return nil, err
		}
		if _, ok := kk.(string); !ok {
			strKeys = false
		}
		if out[kk], err = c.Value(e, depth+1); err != nil {
			return nil, err
		}
	}
	if !strKeys || len(out) == 0 {
		return out, nil
	}
	m := make(map[string]any, len(out))
	for k, e := range out {
		m[k.(string)] = e
	}
	return m, nil
}

// Clone copies what a receiver could change in place of a value Copier
// returned: byte slices, lists and maps, recursively.
func Clone(v any) any {
	switch Lookup(v).Kind {
	case Scalar:
		return v
	case Binary:
		t := v.([]byte)
		return append(make([]byte, 0, len(t)), t...)
	case List:
		t := v.([]any)
		if t == nil {
			return t
		}
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = Clone(e)
		}
		return out
	}
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = Clone(e)
		}
		return out
	case map[any]any:
		out := make(map[any]any, len(t))
		for k, e := range t {
			out[k] = Clone(e)
		}
		return out
	}
	// Arrays and go-amqp's own types: copied the way they were made.
	out, err := ViaCodec(v)
	if err != nil {
		return v // cannot happen: the value came out of the codec
	}
	return out
}

// ViaCodec copies v by encoding and decoding it with go-amqp, for the values
// Copier does not copy itself. It fails for what go-amqp cannot encode.
func ViaCodec(v any) (out any, err error) {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return nil, &Refusal{reasonNil, v}
	}
	defer func() {
		// go-amqp dereferences what it is given; a nil pointer deep inside
		// a described value must fail the send, not the caller.
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("%s %T: %v", reasonEncoder, v, r)
		}
	}()
	data, err := (&amqp.Message{Value: v}).MarshalBinary()
	if err != nil {
		return nil, err
	}
	var m amqp.Message
	if err := m.UnmarshalBinary(data); err != nil {
		return nil, err
	}
	return m.Value, nil
}
