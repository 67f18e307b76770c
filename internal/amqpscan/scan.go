package amqpscan

import (
	"strconv"
	"strings"
)

// DefaultMaxDepth is the deepest nesting of lists, maps, arrays and described
// values that Check accepts when Limits.MaxDepth is zero.
const DefaultMaxDepth = 32

// Limits bounds what Check accepts. The zero value means DefaultMaxDepth and
// no size limit.
type Limits struct {
	// MaxDepth bounds the nesting of compound and described values; zero
	// (or a negative value) means DefaultMaxDepth. The decoder recurses once
	// per level, so a limit far above the default only makes sense for
	// trusted peers.
	MaxDepth int
	// MaxSize bounds the payload's length in bytes; zero means no bound.
	MaxSize uint64
}

// Error says why a payload is poison, and where.
type Error struct {
	// Offset is the byte offset in the payload where the check failed.
	Offset int
	// Reason is a short description for the rejection and the log, e.g.
	// "char value in application-properties".
	Reason string
}

func (e *Error) Error() string { return "amqpscan: " + e.Reason }

// maxCount is the largest element count of a list, map or array that
// go-amqp decodes; it refuses larger ones.
const maxCount = 65536

// Check returns nil when go-amqp can decode payload safely, or an *Error
// saying why not.
func Check(payload []byte, lim Limits) error {
	if lim.MaxSize != 0 && uint64(len(payload)) > lim.MaxSize {
		return &Error{
			Offset: int(lim.MaxSize),
			Reason: "message of " + strconv.Itoa(len(payload)) + " bytes over the " +
				strconv.FormatUint(lim.MaxSize, 10) + "-byte limit",
		}
	}
	s := scanner{b: payload, max: lim.MaxDepth}
	if s.max <= 0 {
		s.max = DefaultMaxDepth
	}
	for s.pos < len(s.b) {
		if err := s.section(); err != nil {
			return err
		}
	}
	return nil
}

// scanner walks a payload once. Every method starts at s.pos and, on
// success, leaves s.pos just past what it scanned.
type scanner struct {
	b   []byte
	pos int
	max int    // deepest nesting allowed
	sec string // the section being scanned, for reasons
}

func (s *scanner) fail(off int, reason string) error {
	// "header with 6 fields", not "header with 6 fields in header".
	if s.sec != "" && !strings.HasPrefix(reason, s.sec+" ") {
		reason += " in " + s.sec
	}
	return &Error{Offset: off, Reason: reason}
}

func (s *scanner) deep(off int) error {
	return s.fail(off, "nesting deeper than "+strconv.Itoa(s.max))
}

// left is the number of bytes from off to the end of the payload.
func (s *scanner) left(off int) int { return len(s.b) - off }

// section scans one described section: a descriptor go-amqp recognises
// followed by the value it decodes that section into.
func (s *scanner) section() error {
	at := s.pos
	s.sec = ""
	if s.left(at) < 3 {
		return s.fail(at, "truncated section descriptor")
	}
	if s.b[at] != 0x00 {
		return s.fail(at, typeName(s.b[at])+" where a section belongs")
	}
	code, n := s.ulongCode(at)
	switch n {
	case -1:
		return s.fail(at, "truncated section descriptor")
	case 0:
		return s.fail(at, "section descriptor of type "+typeName(s.b[at+1]))
	}
	s.pos = at + n
	if code < 0x70 || code > 0x78 {
		return s.fail(at, "unknown section 0x"+strconv.FormatUint(code, 16))
	}
	s.sec = sectionNames[code-0x70]
	switch code {
	case 0x70:
		return s.composite(0, headerFields[:], s.sec)
	case 0x71, 0x72, 0x78: // delivery and message annotations, footer
		return s.nullOr("map", keysAnnotation)
	case 0x73:
		return s.composite(0, propertiesFields[:], s.sec)
	case 0x74:
		return s.nullOr("map", keysString)
	case 0x75:
		return s.nullOr("binary", keysAny)
	case 0x76:
		return s.nullOr("list", keysAny)
	}
	return s.value(0) // amqp-value
}

// sectionNames are the sections' names by descriptor code, from 0x70 on.
var sectionNames = [...]string{
	"header", "delivery-annotations", "message-annotations", "properties",
	"application-properties", "data", "amqp-sequence", "amqp-value", "footer",
}

// ulongCode reads the numeric descriptor, smallulong or ulong, of the
// described value at at: the code and the descriptor's length from at, or
// n 0 for any other descriptor type, which the caller judges, and -1 when
// the payload ends inside the code.
func (s *scanner) ulongCode(at int) (code uint64, n int) {
	switch s.b[at+1] {
	case 0x53:
		if s.left(at) < 3 {
			return 0, -1
		}
		return uint64(s.b[at+2]), 3
	case 0x80:
		if s.left(at) < 10 {
			return 0, -1
		}
		return be64(s.b[at+2:]), 10
	}
	return 0, 0
}

// need fails unless n bytes follow off.
func (s *scanner) need(off, n int) error {
	if s.left(off) < n {
		if off >= len(s.b) {
			return s.fail(off, "missing value")
		}
		return s.fail(off, "truncated "+typeName(s.b[off]))
	}
	return nil
}

// nullOr scans the value of a section that go-amqp decodes as null or
// one type, named as typeName names it: a binary (data), a list
// (amqp-sequence) or a map whose keys follow rule (annotations,
// application-properties, footer).
func (s *scanner) nullOr(kind string, rule keyRule) error {
	if err := s.need(s.pos, 1); err != nil {
		return err
	}
	switch c := s.b[s.pos]; {
	case c == 0x40:
		s.pos++
		return nil
	case kind == "map" && (c == 0xc1 || c == 0xd1):
		return s.mapValue(0, rule)
	case kind == "list" && (c == 0x45 || c == 0xc0 || c == 0xd0):
		return s.list(0)
	case kind == "binary" && (c == 0xa0 || c == 0xb0):
		return s.scalar()
	default:
		want := "a " + kind
		if kind == "binary" {
			want = kind
		}
		return s.fail(s.pos, typeName(c)+" where "+want+" belongs")
	}
}

// value scans one value as go-amqp's ReadAny decodes it; d is the depth
// of the value's container.
func (s *scanner) value(d int) error {
	if err := s.need(s.pos, 1); err != nil {
		return err
	}
	switch s.b[s.pos] {
	case 0x00:
		return s.described(d)
	case 0x45, 0xc0, 0xd0:
		return s.list(d)
	case 0xc1, 0xd1:
		return s.mapValue(d, keysAny)
	case 0xe0, 0xf0:
		return s.array(d)
	}
	return s.scalar()
}

// fixed is the width of the value after a fixed-width constructor that
// go-amqp decodes.
func fixed(c byte) (int, bool) {
	switch c {
	case 0x40, 0x41, 0x42, 0x43, 0x44:
		return 0, true
	case 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56:
		return 1, true
	case 0x60, 0x61:
		return 2, true
	case 0x70, 0x71, 0x72:
		return 4, true
	case 0x80, 0x81, 0x82, 0x83:
		return 8, true
	case 0x98:
		return 16, true
	}
	return 0, false
}

// scalar scans a value of a fixed or variable width type go-amqp decodes.
func (s *scanner) scalar() error {
	at := s.pos
	c := s.b[at]
	if w, ok := fixed(c); ok {
		if s.left(at+1) < w {
			return s.fail(at, "truncated "+typeName(c))
		}
		s.pos = at + 1 + w
		return nil
	}
	var n uint64
	switch c {
	case 0xa0, 0xa1, 0xa3:
		if s.left(at) < 2 {
			return s.fail(at, "truncated "+typeName(c))
		}
		n = uint64(s.b[at+1])
		at += 2
	case 0xb0, 0xb1, 0xb3:
		if s.left(at) < 5 {
			return s.fail(at, "truncated "+typeName(c))
		}
		n = uint64(be32(s.b[at+1:]))
		at += 5
	case 0x73, 0x74, 0x84, 0x94:
		return s.fail(at, typeName(c)+" value")
	default:
		return s.fail(at, typeName(c))
	}
	if n > uint64(s.left(at)) {
		return s.fail(s.pos, typeName(c)+" of "+strconv.FormatUint(n, 10)+" bytes past the end")
	}
	s.pos = at + int(n)
	return nil
}

// header opens the list, map or array that starts at start, one level
// below depth d, whose constructor c is at s.pos-1: it fails past the
// nesting bound, else reads the size and count, applying go-amqp's own
// bounds, and leaves s.pos after the count. inner is the depth of the
// compound's own values; end is where its size says it ends, or -1 for
// list0.
func (s *scanner) header(start int, c byte, d int, what string) (inner, count, end int, err error) {
	if d++; d > s.max {
		return d, 0, 0, s.deep(start)
	}
	at := s.pos - 1
	var size, cf uint64
	switch c {
	case 0x45:
		return d, 0, -1, nil
	case 0xc0, 0xc1, 0xe0:
		if s.left(s.pos) < 2 {
			return d, 0, 0, s.fail(at, "truncated "+what)
		}
		size, cf = uint64(s.b[s.pos]), 1
		count = int(s.b[s.pos+1])
		s.pos++
	default: // 0xd0, 0xd1, 0xf0
		if s.left(s.pos) < 8 {
			return d, 0, 0, s.fail(at, "truncated "+what)
		}
		size, cf = uint64(be32(s.b[s.pos:])), 4
		n := be32(s.b[s.pos+4:])
		if n > maxCount {
			return d, 0, 0, s.fail(at, what+" of "+strconv.FormatUint(uint64(n), 10)+" elements, over go-amqp's 65536")
		}
		count = int(n)
		s.pos += 4
	}
	if size > uint64(s.left(s.pos)) {
		return d, 0, 0, s.fail(at, what+" of "+strconv.FormatUint(size, 10)+" bytes past the end")
	}
	if size < cf || uint64(count) > size-cf {
		return d, 0, 0, s.fail(at, what+" of "+strconv.Itoa(count)+" elements in "+strconv.FormatUint(size, 10)+" bytes")
	}
	end = s.pos + int(size)
	s.pos += int(cf)
	return d, count, end, nil
}

// closed fails unless the compound that started at at ended where its size
// said it would: go-amqp ignores the size and reads on, so a mismatch
// means it would decode something other than what the encoder meant.
func (s *scanner) closed(at, end int, what string) error {
	if end >= 0 && s.pos != end {
		return s.fail(at, what+" size does not match its contents")
	}
	return nil
}

// open opens the compound whose constructor is at s.pos, returning where
// it starts with what header returns.
func (s *scanner) open(d int, what string) (at, inner, count, end int, err error) {
	at = s.pos
	s.pos++
	inner, count, end, err = s.header(at, s.b[at], d, what)
	return
}

// badType is the reason a value of type c at p cannot stand where it is:
// go-amqp cannot decode char or decimal values at all, so those say so,
// and any other type is out of place.
func (s *scanner) badType(p int, c byte, out string) error {
	switch c {
	case 0x73, 0x74, 0x84, 0x94:
		return s.fail(p, typeName(c)+" value")
	}
	return s.fail(p, out)
}

func (s *scanner) list(d int) error {
	at, d, count, end, err := s.open(d, "list")
	if err != nil {
		return err
	}
	for range count {
		if err := s.value(d); err != nil {
			return err
		}
	}
	return s.closed(at, end, "list")
}

// keyRule is what a map's keys may be.
type keyRule uint8

const (
	// keysAny: any value go-amqp can use as a key of a map[any]any:
	// scalars except binary, which it refuses.
	keysAny keyRule = iota
	// keysAnnotation: what keysAny allows. The spec says symbol or ulong,
	// but go-amqp stores annotation and footer keys in a map[any]any and
	// only panics on one it cannot hash; a string key from a lax client is
	// no reason to reject its message.
	keysAnnotation
	// keysString: string or symbol, which go-amqp reads into a
	// map[string]any.
	keysString
)

func keyOK(rule keyRule, c byte) bool {
	switch rule {
	case keysString:
		return c == 0xa1 || c == 0xb1 || c == 0xa3 || c == 0xb3
	}
	if _, ok := fixed(c); ok {
		return true
	}
	return c == 0xa1 || c == 0xb1 || c == 0xa3 || c == 0xb3
}

// mapValue scans a map whose constructor is at s.pos.
func (s *scanner) mapValue(d int, rule keyRule) error {
	at := s.pos
	s.pos++
	return s.mapBody(at, s.b[at], d, rule)
}

// mapBody scans a map whose constructor c is at s.pos-1 (or, in an array,
// shared by all elements).
func (s *scanner) mapBody(at int, c byte, d int, rule keyRule) error {
	d, count, end, err := s.header(at, c, d, "map")
	if err != nil {
		return err
	}
	if count%2 != 0 {
		return s.fail(at, "map of odd count "+strconv.Itoa(count))
	}
	for i := 0; i < count; i += 2 {
		if err := s.need(s.pos, 1); err != nil {
			return err
		}
		k := s.b[s.pos]
		if !keyOK(rule, k) {
			return s.badType(s.pos, k, typeName(k)+" key")
		}
		if err := s.scalar(); err != nil {
			return err
		}
		if err := s.value(d); err != nil {
			return err
		}
	}
	return s.closed(at, end, "map")
}

func (s *scanner) array(d int) error {
	at, d, count, end, err := s.open(d, "array")
	if err != nil {
		return err
	}
	if s.pos >= end {
		return s.fail(at, "array without element type")
	}
	ec := s.b[s.pos]
	s.pos++
	switch ec {
	case 0x50, 0x51, 0x60, 0x61, 0x43, 0x52, 0x70, 0x54, 0x71,
		0x44, 0x53, 0x80, 0x55, 0x81, 0x72, 0x82, 0x56, 0x41, 0x42,
		0x83, 0x98:
		w, _ := fixed(ec)
		n := uint64(count) * uint64(w)
		if n > uint64(end-s.pos) {
			return s.fail(at, "array of "+strconv.Itoa(count)+" "+typeName(ec)+" past its size")
		}
		s.pos += int(n)
	case 0xa0, 0xa1, 0xa3, 0xb0, 0xb1, 0xb3:
		// go-amqp assumes at least 2 bytes an element from the
		// constructor on, and fails otherwise.
		if uint64(count)*2 > uint64(s.left(s.pos-1)) {
			return s.fail(at, "array of "+strconv.Itoa(count)+" "+typeName(ec)+" past the end")
		}
		for range count {
			if err := s.element(ec); err != nil {
				return err
			}
		}
	case 0xc1, 0xd1:
		for range count {
			if err := s.mapBody(s.pos, ec, d, keysAny); err != nil {
				return err
			}
		}
	default:
		return s.fail(at, "array of "+typeName(ec))
	}
	return s.closed(at, end, "array")
}

// element scans one variable-width array element: a length and bytes.
func (s *scanner) element(c byte) error {
	at := s.pos
	var n uint64
	if c&0xf0 == 0xa0 {
		if s.left(at) < 1 {
			return s.fail(at, "truncated "+typeName(c)+" array")
		}
		n = uint64(s.b[at])
		at++
	} else {
		if s.left(at) < 4 {
			return s.fail(at, "truncated "+typeName(c)+" array")
		}
		n = uint64(be32(s.b[at:]))
		at += 4
	}
	if n > uint64(s.left(at)) {
		return s.fail(s.pos, typeName(c)+" of "+strconv.FormatUint(n, 10)+" bytes past the end")
	}
	s.pos = at + int(n)
	return nil
}

// described scans a described value as go-amqp's readComposite decodes it.
func (s *scanner) described(d int) error {
	at := s.pos
	if d++; d > s.max {
		return s.deep(at)
	}
	if s.left(at) < 2 {
		return s.fail(at, "truncated described value")
	}
	code, n := s.ulongCode(at)
	numeric := n > 0
	switch c := s.b[at+1]; {
	case n < 0:
		return s.fail(at, "truncated described value")
	case numeric:
		s.pos = at + n
	case c == 0x44:
		numeric = true
		s.pos = at + 2
	case c == 0xa3 || c == 0xb3:
		s.pos = at + 1
		if err := s.scalar(); err != nil {
			return err
		}
	default:
		return s.fail(at, "descriptor of type "+typeName(c))
	}
	if numeric && code <= 0xff {
		switch {
		case code == 0x1d:
			return s.composite(d, errorFields[:], "error")
		case code >= 0x2b && code <= 0x2e:
			return s.composite(d, nil, "lifetime-policy")
		case code >= 0x10 && code <= 0x18, code >= 0x23 && code <= 0x29,
			code >= 0x40 && code <= 0x44, code >= 0x70 && code <= 0x78:
			// go-amqp refuses frames, terminus and section types
			// here; delivery states it decodes, but no message
			// carries one.
			return s.fail(at, "described 0x"+strconv.FormatUint(code, 16))
		}
	}
	if err := s.need(s.pos, 1); err != nil {
		return err
	}
	return s.value(d)
}

// fieldKind is what go-amqp decodes a composite's field into.
type fieldKind uint8

const (
	fAny       fieldKind = iota // any: ReadAny
	fBool                       // bool
	fUbyte                      // uint8
	fMillis                     // Milliseconds: any unsigned integer
	fUint                       // uint32
	fString                     // string or symbol
	fCondition                  // string or symbol, and never null
	fBinary                     // []byte
	fTimestamp                  // time.Time
	fStringMap                  // map[string]any
)

type field struct {
	name string
	kind fieldKind
}

var headerFields = [...]field{
	{"durable", fBool},
	{"priority", fUbyte},
	{"ttl", fMillis},
	{"first-acquirer", fBool},
	{"delivery-count", fUint},
}

var propertiesFields = [...]field{
	{"message-id", fAny},
	{"user-id", fBinary},
	{"to", fString},
	{"subject", fString},
	{"reply-to", fString},
	{"correlation-id", fAny},
	{"content-type", fString},
	{"content-encoding", fString},
	{"absolute-expiry-time", fTimestamp},
	{"creation-time", fTimestamp},
	{"group-id", fString},
	{"group-sequence", fUint},
	{"reply-to-group-id", fString},
}

var errorFields = [...]field{
	{"condition", fCondition},
	{"description", fString},
	{"info", fStringMap},
}

func fieldOK(k fieldKind, c byte) bool {
	switch k {
	case fBool:
		return c == 0x56 || c == 0x41 || c == 0x42
	case fUbyte:
		return c == 0x50
	case fMillis:
		switch c {
		case 0x43, 0x44, 0x50, 0x52, 0x53, 0x60, 0x70, 0x80:
			return true
		}
		return false
	case fUint:
		return c == 0x43 || c == 0x52 || c == 0x70
	case fString, fCondition:
		return c == 0xa1 || c == 0xb1 || c == 0xa3 || c == 0xb3
	case fBinary:
		return c == 0xa0 || c == 0xb0
	case fTimestamp:
		return c == 0x83
	case fStringMap:
		return c == 0xc1 || c == 0xd1
	}
	return true
}

// composite scans the list of a composite type's fields (header,
// properties, error, lifetime policy) as go-amqp's UnmarshalComposite
// decodes it into fields; d is the depth of its container.
func (s *scanner) composite(d int, fields []field, name string) error {
	at := s.pos
	if err := s.need(at, 1); err != nil {
		return err
	}
	c := s.b[at]
	if c != 0x45 && c != 0xc0 && c != 0xd0 {
		return s.fail(at, name+" of type "+typeName(c))
	}
	_, d, count, end, err := s.open(d, name)
	if err != nil {
		return err
	}
	if count > len(fields) {
		return s.fail(at, name+" with "+strconv.Itoa(count)+" fields")
	}
	if len(fields) > 0 && fields[0].kind == fCondition && count == 0 {
		return s.fail(at, name+" without condition")
	}
	for i := range count {
		f := fields[i]
		p := s.pos
		if err := s.need(p, 1); err != nil {
			return err
		}
		c := s.b[p]
		if c == 0x40 {
			if f.kind == fCondition {
				return s.fail(p, name+" without condition")
			}
			s.pos++
			continue
		}
		if !fieldOK(f.kind, c) {
			return s.badType(p, c, f.name+" of type "+typeName(c))
		}
		switch f.kind {
		case fAny:
			err = s.value(d)
		case fStringMap:
			err = s.mapValue(d, keysString)
		default:
			err = s.scalar()
		}
		if err != nil {
			return err
		}
	}
	return s.closed(at, end, name)
}

func typeName(c byte) string {
	switch c {
	case 0x00:
		return "described"
	case 0x40:
		return "null"
	case 0x41, 0x42, 0x56:
		return "boolean"
	case 0x50:
		return "ubyte"
	case 0x51:
		return "byte"
	case 0x60:
		return "ushort"
	case 0x61:
		return "short"
	case 0x43, 0x52, 0x70:
		return "uint"
	case 0x54, 0x71:
		return "int"
	case 0x44, 0x53, 0x80:
		return "ulong"
	case 0x55, 0x81:
		return "long"
	case 0x72:
		return "float"
	case 0x82:
		return "double"
	case 0x74:
		return "decimal32"
	case 0x84:
		return "decimal64"
	case 0x94:
		return "decimal128"
	case 0x73:
		return "char"
	case 0x83:
		return "timestamp"
	case 0x98:
		return "uuid"
	case 0xa0, 0xb0:
		return "binary"
	case 0xa1, 0xb1:
		return "string"
	case 0xa3, 0xb3:
		return "symbol"
	case 0x45, 0xc0, 0xd0:
		return "list"
	case 0xc1, 0xd1:
		return "map"
	case 0xe0, 0xf0:
		return "array"
	}
	return "unknown type 0x" + hex2(c)
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&0xf]})
}

func be32(b []byte) uint32 {
	_ = b[3]
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func be64(b []byte) uint64 {
	_ = b[7]
	return uint64(be32(b))<<32 | uint64(be32(b[4:]))
}
