package sqlfilter

import (
	"math"
	"math/big"
	"reflect"
	"time"
)

// kind is the type of a value as RabbitMQ's evaluator sees it. Erlang has
// one integer type without bounds, one float type and one binary type for
// strings, symbols, binaries and UUIDs alike; so has this package.
type kind uint8

const (
	kNull  kind = iota // NULL, and UNKNOWN: RabbitMQ does not tell them apart
	kBool              // i is 1 for TRUE, 0 for FALSE
	kInt               // i
	kBig               // b, only when outside int64
	kFloat             // f, always finite
	kStr               // s: the bytes of a string, symbol, binary or UUID
)

type value struct {
	k kind
	i int64
	f float64
	s string
	b *big.Int
}

var null = value{}

func boolValue(b bool) value {
	if b {
		return value{k: kBool, i: 1}
	}
	return value{k: kBool}
}

func intValue(i int64) value   { return value{k: kInt, i: i} }
func strValue(s string) value  { return value{k: kStr, s: s} }
func isTrue(v value) bool      { return v.k == kBool && v.i == 1 }
func isFalse(v value) bool     { return v.k == kBool && v.i == 0 }
func (v value) isNumber() bool { return v.k == kInt || v.k == kBig || v.k == kFloat }

// floatValue is f, or NULL when it is not finite: Erlang has no infinite
// float, and an overflow is an evaluation error there.
func floatValue(f float64) value {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return null
	}
	return value{k: kFloat, f: f}
}

// bigValue is b, as an int64 when it fits.
func bigValue(b *big.Int) value {
	if b.IsInt64() {
		return intValue(b.Int64())
	}
	return value{k: kBig, b: b}
}

func uintValue(u uint64) value {
	if u <= math.MaxInt64 {
		return intValue(int64(u))
	}
	return bigValue(new(big.Int).SetUint64(u))
}

// goValue is the value of a header or message-id as RabbitMQ decodes it from
// the wire. A type RabbitMQ does not filter on (lists, maps, described values,
// a null) is NULL: RabbitMQ leaves such an application property out.
func goValue(v any) value {
	switch x := v.(type) {
	case nil:
		return null
	case string:
		return strValue(x)
	case []byte:
		return strValue(string(x))
	case bool:
		return boolValue(x)
	case int:
		return intValue(int64(x))
	case int8:
		return intValue(int64(x))
	case int16:
		return intValue(int64(x))
	case int32:
		return intValue(int64(x))
	case int64:
		return intValue(x)
	case uint:
		return uintValue(uint64(x))
	case uint8:
		return intValue(int64(x))
	case uint16:
		return intValue(int64(x))
	case uint32:
		return intValue(int64(x))
	case uint64:
		return uintValue(x)
	case float32:
		return floatValue(float64(x))
	case float64:
		return floatValue(x)
	case time.Time:
		return intValue(x.UnixMilli())
	}
	// Named types: a symbol is a string, a UUID a [16]byte.
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		return strValue(rv.String())
	case reflect.Bool:
		return boolValue(rv.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return intValue(rv.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return uintValue(rv.Uint())
	case reflect.Float32, reflect.Float64:
		return floatValue(rv.Float())
	case reflect.Slice, reflect.Array:
		if rv.Type().Elem().Kind() != reflect.Uint8 {
			return null
		}
		b := make([]byte, rv.Len())
		reflect.Copy(reflect.ValueOf(b), rv)
		return strValue(string(b))
	}
	return null
}

// equal is Erlang's ==: numbers by value across integers and floats, other
// values only of the same type.
func equal(a, b value) bool {
	switch {
	case a.isNumber() && b.isNumber():
		return cmpNumbers(a, b) == 0
	case a.k != b.k:
		return false
	case a.k == kStr:
		return a.s == b.s
	case a.k == kBool:
		return a.i == b.i
	}
	return false
}

// cmpNumbers compares two numbers exactly, as Erlang does (an integer is not
// rounded to a float to compare it with one).
func cmpNumbers(a, b value) int {
	switch {
	case a.k == kInt && b.k == kInt:
		return cmp3(a.i < b.i, a.i > b.i)
	case a.k == kFloat && b.k == kFloat:
		return cmp3(a.f < b.f, a.f > b.f)
	case a.k == kInt && b.k == kFloat && exactFloat(a.i):
		return cmp3(float64(a.i) < b.f, float64(a.i) > b.f)
	case a.k == kFloat && b.k == kInt && exactFloat(b.i):
		return cmp3(a.f < float64(b.i), a.f > float64(b.i))
	case a.k == kFloat || b.k == kFloat:
		return a.bigFloat().Cmp(b.bigFloat())
	}
	return a.bigInt().Cmp(b.bigInt())
}

func cmp3(less, greater bool) int {
	switch {
	case less:
		return -1
	case greater:
		return 1
	}
	return 0
}

// exactFloat reports whether float64(i) is exactly i.
func exactFloat(i int64) bool { return -1<<53 <= i && i <= 1<<53 }

func (v value) bigInt() *big.Int {
	if v.k == kBig {
		return v.b
	}
	return big.NewInt(v.i)
}

func (v value) bigFloat() *big.Float {
	switch v.k {
	case kFloat:
		return new(big.Float).SetFloat64(v.f)
	case kBig:
		return new(big.Float).SetInt(v.b)
	}
	return new(big.Float).SetInt64(v.i)
}

// float is v as a float64, as Erlang converts an integer for float
// arithmetic; ok is false when it is out of range (badarith there).
func (v value) float() (f float64, ok bool) {
	switch v.k {
	case kFloat:
		return v.f, true
	case kInt:
		return float64(v.i), true
	}
	f, _ = new(big.Float).SetInt(v.b).Float64()
	return f, !math.IsInf(f, 0)
}

// compare evaluates a comparison. NULL on either side is UNKNOWN; values of
// unlike types are FALSE for every operator but <> (RabbitMQ compares with
// Erlang's == and /=), and strings order byte by byte.
func compare(op tokKind, a, b value) value {
	if a.k == kNull || b.k == kNull {
		return null
	}
	switch op {
	case tEq:
		return boolValue(equal(a, b))
	case tNe:
		return boolValue(!equal(a, b))
	}
	var c int
	switch {
	case a.isNumber() && b.isNumber():
		c = cmpNumbers(a, b)
	case a.k == kStr && b.k == kStr:
		c = cmp3(a.s < b.s, a.s > b.s)
	default:
		return boolValue(false)
	}
	switch op {
	case tGt:
		return boolValue(c > 0)
	case tGe:
		return boolValue(c >= 0)
	case tLt:
		return boolValue(c < 0)
	}
	return boolValue(c <= 0)
}

// arith evaluates + - * / % on numbers; anything else, a division by zero
// and a float overflow are UNKNOWN. / always divides as floats (Erlang's /,
// so 7 / 2 = 3.5) and % takes integers only.
func arith(op tokKind, a, b value) value {
	if !a.isNumber() || !b.isNumber() {
		return null
	}
	switch op {
	case tSlash:
		x, okx := a.float()
		y, oky := b.float()
		if !okx || !oky || y == 0 {
			return null
		}
		return floatValue(x / y)
	case tPercent:
		if a.k == kFloat || b.k == kFloat {
			return null
		}
		if b.k == kInt && b.i == 0 {
			return null
		}
		if a.k == kInt && b.k == kInt {
			return intValue(a.i % b.i) // truncated, as Erlang's rem; MinInt64 % -1 is 0
		}
		return bigValue(new(big.Int).Rem(a.bigInt(), b.bigInt()))
	}
	if a.k == kFloat || b.k == kFloat {
		x, okx := a.float()
		y, oky := b.float()
		if !okx || !oky {
			return null
		}
		switch op {
		case tPlus:
			return floatValue(x + y)
		case tMinus:
			return floatValue(x - y)
		}
		return floatValue(x * y)
	}
	if a.k == kInt && b.k == kInt {
		if r, ok := intArith(op, a.i, b.i); ok {
			return intValue(r)
		}
	}
	x, y := a.bigInt(), b.bigInt()
	switch op {
	case tPlus:
		return bigValue(new(big.Int).Add(x, y))
	case tMinus:
		return bigValue(new(big.Int).Sub(x, y))
	}
	return bigValue(new(big.Int).Mul(x, y))
}

// intArith is + - * on int64; ok is false on overflow.
func intArith(op tokKind, x, y int64) (r int64, ok bool) {
	switch op {
	case tPlus:
		r = x + y
		return r, (r > x) == (y > 0)
	case tMinus:
		r = x - y
		return r, (r < x) == (y > 0)
	}
	if x == 0 || y == 0 {
		return 0, true
	}
	r = x * y
	return r, r/y == x && !(x == -1 && y == math.MinInt64) && !(y == -1 && x == math.MinInt64)
}

// negate is unary minus on a number; anything else is UNKNOWN.
func negate(v value) value {
	switch v.k {
	case kInt:
		if v.i != math.MinInt64 {
			return intValue(-v.i)
		}
		return bigValue(new(big.Int).Neg(v.bigInt()))
	case kBig:
		return bigValue(new(big.Int).Neg(v.b))
	case kFloat:
		return value{k: kFloat, f: -v.f}
	}
	return null
}
