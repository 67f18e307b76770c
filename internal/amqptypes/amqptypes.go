// Package amqptypes is the one statement of which Go values go-amqp can put
// on the wire and what its decoder hands back for each. The Message
// conversion (internal/protocol) checks outgoing values with it and the
// in-process broker (inproc) checks and copies published values with it, so
// the two cannot drift apart; its test runs every row of Table through
// go-amqp's real encoder and decoder.
package amqptypes

import (
	"math"
	"reflect"
	"time"
	"unicode/utf8"

	amqp "github.com/Azure/go-amqp"
)

// Kind is how a Go type goes on the wire, which decides how it is checked
// and copied.
type Kind uint8

const (
	// Refused: go-amqp cannot encode the type.
	Refused Kind = iota
	// Scalar: an AMQP primitive Go cannot change in place.
	Scalar
	// Binary: []byte, a primitive a holder can change in place.
	Binary
	// List: []any, an AMQP list.
	List
	// Map: a map of values (map[string]any, map[any]any,
	// map[amqp.Symbol]any, amqp.Annotations), an AMQP map.
	Map
	// Array: a typed slice, an AMQP array of one primitive type.
	Array
	// Described: go-amqp's own types the table does not name (described
	// values and the like), recognised by its marshaler interface.
	Described
	// Pointer: a pointer to an encodable type, which go-amqp encodes as
	// what it points to.
	Pointer
)

// Row is one Go type of Table.
type Row struct {
	// Example is a value of the type; its type is the row's key.
	Example any
	// AMQP is the type on the wire, or why the type is refused.
	AMQP string
	Kind Kind
	// Decoded is what go-amqp's decoder returns for Example.
	Decoded any
	// norm turns a value into what go-amqp's decoder returns for it; nil
	// when that is the value itself.
	norm func(any) any
	// valid says why a value of the type cannot be sent ("" when it can),
	// and the element at fault.
	valid func(v any, r Rules) (string, any)
}

var (
	// MinTime and MaxTime bound an AMQP timestamp, a signed 64-bit count of
	// milliseconds (a time is truncated to its millisecond, so the last one
	// is whole). go-amqp wraps a time outside silently.
	MinTime = time.UnixMilli(math.MinInt64)
	MaxTime = time.UnixMilli(math.MaxInt64).Add(time.Millisecond - 1)
)

var exampleTime = time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)

// Table lists the Go types go-amqp's encoder names, and examples of types it
// refuses. Types it does not list are refused unless they are pointers to
// listed types or go-amqp's own (Lookup).
var Table = []Row{
	{Example: nil, AMQP: "null", Kind: Scalar, Decoded: nil},
	{Example: amqp.Null{}, AMQP: "null", Kind: Scalar, Decoded: nil, norm: func(any) any { return nil }},
	{Example: true, AMQP: "boolean", Kind: Scalar, Decoded: true},
	{Example: int8(-1), AMQP: "byte", Kind: Scalar, Decoded: int8(-1)},
	{Example: int16(-2), AMQP: "short", Kind: Scalar, Decoded: int16(-2)},
	{Example: int32(-3), AMQP: "int", Kind: Scalar, Decoded: int32(-3)},
	{Example: int64(-4), AMQP: "long", Kind: Scalar, Decoded: int64(-4)},
	{Example: int(-5), AMQP: "long", Kind: Scalar, Decoded: int64(-5), norm: func(v any) any { return int64(v.(int)) }},
	{Example: uint8(1), AMQP: "ubyte", Kind: Scalar, Decoded: uint8(1)},
	{Example: uint16(2), AMQP: "ushort", Kind: Scalar, Decoded: uint16(2)},
	{Example: uint32(3), AMQP: "uint", Kind: Scalar, Decoded: uint32(3)},
	{Example: uint64(4), AMQP: "ulong", Kind: Scalar, Decoded: uint64(4)},
	{Example: uint(5), AMQP: "ulong", Kind: Scalar, Decoded: uint64(5), norm: func(v any) any { return uint64(v.(uint)) }},
	{Example: float32(1.5), AMQP: "float", Kind: Scalar, Decoded: float32(1.5)},
	{Example: 2.5, AMQP: "double", Kind: Scalar, Decoded: 2.5},
	{Example: "s", AMQP: "string", Kind: Scalar, Decoded: "s", valid: validString},
	{Example: amqp.Symbol("y"), AMQP: "symbol", Kind: Scalar, Decoded: "y", norm: func(v any) any { return string(v.(amqp.Symbol)) }},
	{Example: amqp.UUID{1, 2}, AMQP: "uuid", Kind: Scalar, Decoded: amqp.UUID{1, 2}},
	{Example: exampleTime, AMQP: "timestamp", Kind: Scalar, Decoded: Millis(exampleTime), norm: func(v any) any { return Millis(v.(time.Time)) }, valid: validTime},
	{Example: []byte("b"), AMQP: "binary", Kind: Binary, Decoded: []byte("b")},

	{Example: []any{int64(1), "a"}, AMQP: "list", Kind: List, Decoded: []any{int64(1), "a"}},
	{Example: map[string]any{"a": int64(1)}, AMQP: "map, string keys", Kind: Map, Decoded: map[string]any{"a": int64(1)}},
	{Example: map[any]any{int64(1): "a"}, AMQP: "map", Kind: Map, Decoded: map[any]any{int64(1): "a"}},
	{Example: map[amqp.Symbol]any{"a": int64(1)}, AMQP: "map, symbol keys", Kind: Map, Decoded: map[string]any{"a": int64(1)}},
	{Example: amqp.Annotations{"a": int64(1), int64(2): "b"}, AMQP: "map, symbol or long keys", Kind: Map, Decoded: map[any]any{"a": int64(1), int64(2): "b"}},

	{Example: []int8{-1}, AMQP: "array of byte", Kind: Array, Decoded: []int8{-1}},
	{Example: []int16{-2}, AMQP: "array of short", Kind: Array, Decoded: []int16{-2}},
	{Example: []int32{-3}, AMQP: "array of int", Kind: Array, Decoded: []int32{-3}},
	{Example: []int64{-4}, AMQP: "array of long", Kind: Array, Decoded: []int64{-4}},
	{Example: []uint16{2}, AMQP: "array of ushort", Kind: Array, Decoded: []uint16{2}},
	{Example: []uint32{3}, AMQP: "array of uint", Kind: Array, Decoded: []uint32{3}},
	{Example: []uint64{4}, AMQP: "array of ulong", Kind: Array, Decoded: []uint64{4}},
	{Example: []float32{1.5}, AMQP: "array of float", Kind: Array, Decoded: []float32{1.5}},
	{Example: []float64{2.5}, AMQP: "array of double", Kind: Array, Decoded: []float64{2.5}},
	{Example: []bool{true}, AMQP: "array of boolean", Kind: Array, Decoded: []bool{true}},
	{Example: []string{"s"}, AMQP: "array of string", Kind: Array, Decoded: []string{"s"}, valid: validStrings},
	{Example: []amqp.Symbol{"y"}, AMQP: "array of symbol", Kind: Array, Decoded: []amqp.Symbol{"y"}},
	{Example: [][]byte{[]byte("b")}, AMQP: "array of binary", Kind: Array, Decoded: [][]byte{[]byte("b")}},
	{Example: []time.Time{exampleTime}, AMQP: "array of timestamp", Kind: Array, Decoded: []time.Time{Millis(exampleTime).UTC()}, valid: validTimes},
	{Example: []amqp.UUID{{3}}, AMQP: "array of uuid", Kind: Array, Decoded: []amqp.UUID{{3}}},
	{Example: []map[any]any{{int64(1): "a"}}, AMQP: "array of map", Kind: Array, Decoded: []map[any]any{{int64(1): "a"}}},

	// Refused: AMQP has the type but go-amqp does not name the Go one, or
	// AMQP has no such type.
	{Example: map[string]int{}, AMQP: "refused: maps must have any values", Kind: Refused},
	{Example: []chan int{}, AMQP: "refused: no AMQP type", Kind: Refused},
	{Example: make(chan int), AMQP: "refused: no AMQP type", Kind: Refused},
	{Example: struct{}{}, AMQP: "refused: no AMQP type", Kind: Refused},
	{Example: complex(1, 2), AMQP: "refused: no AMQP type", Kind: Refused},
	{Example: namedString("x"), AMQP: "refused: go-amqp names no user types", Kind: Refused},
}

// namedString is a user type, which go-amqp does not know.
type namedString string

var rows = func() map[reflect.Type]*Row {
	m := make(map[reflect.Type]*Row, len(Table))
	for i := range Table {
		m[reflect.TypeOf(Table[i].Example)] = &Table[i]
	}
	return m
}()

var (
	describedRow = &Row{AMQP: "described value or other go-amqp type", Kind: Described}
	pointerRow   = &Row{AMQP: "what it points to", Kind: Pointer}
	refusedRow   = &Row{AMQP: "refused: not a type go-amqp names", Kind: Refused}
)

// Lookup returns v's row: the row of its type, or for a type the table does
// not list, a Described row for go-amqp's own types, a Pointer row for a
// pointer to a type the table accepts and a Refused row for the rest.
func Lookup(v any) *Row {
	if r, ok := rows[reflect.TypeOf(v)]; ok {
		return r
	}
	if isMarshaler(v) {
		return describedRow
	}
	if t := reflect.TypeOf(v); t.Kind() == reflect.Pointer {
		if r, ok := rows[t.Elem()]; ok && r.Kind != Refused {
			return pointerRow
		}
	}
	return refusedRow
}

// Norm is v as go-amqp's decoder returns it, for a value of a Scalar row.
func (r *Row) Norm(v any) any {
	if r.norm == nil {
		return v
	}
	return r.norm(v)
}

// Millis is t as an AMQP timestamp decodes: whole milliseconds, local time.
func Millis(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()) }

// go-amqp refuses a string that is not UTF-8.
func validString(v any, _ Rules) (string, any) {
	if !utf8.ValidString(v.(string)) {
		return reasonUTF8, v
	}
	return "", nil
}

func validTime(v any, r Rules) (string, any) {
	if t := v.(time.Time); r.TimeRange && (t.Before(MinTime) || t.After(MaxTime)) {
		return reasonTime, v
	}
	return "", nil
}

func validStrings(v any, r Rules) (string, any) {
	for _, s := range v.([]string) {
		if reason, bad := validString(s, r); reason != "" {
			return reason, bad
		}
	}
	return "", nil
}

func validTimes(v any, r Rules) (string, any) {
	for _, t := range v.([]time.Time) {
		if reason, bad := validTime(t, r); reason != "" {
			return reason, bad
		}
	}
	return "", nil
}

// Int is v as an int64 when v holds one of Go's integer types, whatever
// its width: another client, or go-amqp's decoder, may spell one number as
// any of them. ok is false for any other type, and for an unsigned value
// above math.MaxInt64, to which n saturates.
func Int(v any) (n int64, ok bool) {
	r := reflect.ValueOf(v)
	if !r.IsValid() || r.Type().PkgPath() != "" {
		return 0, false // a named type is not a wire integer: go-amqp refuses it
	}
	switch r.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return r.Int(), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if u := r.Uint(); u <= math.MaxInt64 {
			return int64(u), true
		}
		return math.MaxInt64, false
	}
	return 0, false
}

// AnnotationKey checks and normalises a key of amqp.Annotations: go-amqp
// sends string keys as symbols and int keys as longs, and refuses others.
func AnnotationKey(k any) (any, bool) {
	switch k := k.(type) {
	case string, int64:
		return k, true
	case amqp.Symbol:
		return string(k), true
	case int:
		return int64(k), true
	}
	return nil, false
}

// marshaler is go-amqp's internal marshaler interface, instantiated with its
// internal buffer type by inference from one of its exported methods. Only
// go-amqp's own types can implement it (the buffer type is internal).
type marshaler[B any] interface{ Marshal(*B) error }

func marshalerCheck[B any](func(*B) error) func(any) bool {
	return func(v any) bool {
		_, ok := v.(marshaler[B])
		return ok
	}
}

var isMarshaler = marshalerCheck(amqp.Null{}.Marshal)
