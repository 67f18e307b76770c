package amqpscan

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
)

type sample struct {
	name    string
	payload []byte
}

func ptr[T any](v T) *T { return &v }

// normalMessages are messages that must pass: go-amqp's own encoding of
// ordinary messages, and the forms other peers (RabbitMQ, Qpid Proton,
// rhea) write.
func normalMessages() []sample {
	when := time.UnixMilli(1_764_000_000_123)
	big := bytes.Repeat([]byte("x"), 300)
	out := []sample{
		{"go-amqp data", mustMarshal(amqp.NewMessage([]byte("hello")))},
		{"go-amqp empty data", mustMarshal(amqp.NewMessage([]byte{}))},
		{"go-amqp multiple data", mustMarshal(&amqp.Message{Data: [][]byte{[]byte("a"), big, nil}})},
		{"go-amqp 64 KiB data", mustMarshal(amqp.NewMessage(bytes.Repeat([]byte{0xc1}, 64<<10)))},
		{"go-amqp everything", mustMarshal(&amqp.Message{
			Header: &amqp.MessageHeader{
				Durable: true, Priority: 9, TTL: 30 * time.Second,
				FirstAcquirer: true, DeliveryCount: 3,
			},
			DeliveryAnnotations: amqp.Annotations{
				"x-opt-lock-token": amqp.UUID{1, 2, 3},
				int64(7):           int64(-1),
				-1000:              "int key",
				"rejected":         &amqp.Error{Condition: "amqp:decode-error", Description: "bad", Info: map[string]any{"at": int32(3)}},
			},
			Annotations: amqp.Annotations{
				"x-opt-partition-key":   "key",
				"x-opt-sequence-number": int64(42),
				"x-opt-enqueued-time":   when,
				"x-opt-offset":          "-1",
				"x-opt-list":            []any{"a", int32(1), nil},
				"x-opt-map":             map[string]any{"k": "v"},
				"x-opt-syms":            []amqp.Symbol{"a", "b"},
				int64(1000):             true,
			},
			Properties: &amqp.MessageProperties{
				MessageID:          "id-1",
				UserID:             []byte("guest"),
				To:                 ptr("/queues/q1"),
				Subject:            ptr("subject"),
				ReplyTo:            ptr("/queues/replies"),
				CorrelationID:      uint64(99),
				ContentType:        ptr("application/json"),
				ContentEncoding:    ptr("gzip"),
				AbsoluteExpiryTime: ptr(when.Add(time.Hour)),
				CreationTime:       ptr(when),
				GroupID:            ptr("group"),
				GroupSequence:      ptr(uint32(12)),
				ReplyToGroupID:     ptr("reply-group"),
			},
			ApplicationProperties: map[string]any{
				"bool": true, "false": false, "u8": uint8(200), "u16": uint16(60000),
				"u32": uint32(1 << 31), "u32s": uint32(7), "u64": uint64(1 << 63), "u64s": uint64(3),
				"i8": int8(-8), "i16": int16(-16), "i32": int32(-32), "i32b": int32(1 << 30),
				"i64": int64(-64), "i64b": int64(1 << 60), "f32": float32(1.5), "f64": 2.25,
				"string": "text", "long string": string(big), "binary": []byte{0, 1, 2},
				"time": when, "uuid": amqp.UUID{9}, "symbol": amqp.Symbol("sym"), "null": nil,
				"int": 5, "uint": uint(6),
			},
			Data:   [][]byte{[]byte("part one"), []byte("part two")},
			Footer: amqp.Annotations{"x-hash": []byte{0xde, 0xad}, "x-sig": "abc"},
		})},
		{"go-amqp message-id uint64", mustMarshal(&amqp.Message{Properties: &amqp.MessageProperties{MessageID: uint64(1 << 40), CorrelationID: uint64(0)}, Data: [][]byte{{1}}})},
		{"go-amqp message-id uuid", mustMarshal(&amqp.Message{Properties: &amqp.MessageProperties{MessageID: amqp.UUID{1}, CorrelationID: amqp.UUID{2}}, Data: [][]byte{{1}}})},
		{"go-amqp message-id binary", mustMarshal(&amqp.Message{Properties: &amqp.MessageProperties{MessageID: []byte{1, 2}, CorrelationID: []byte("c")}, Data: [][]byte{{1}}})},
		{"go-amqp default header", mustMarshal(&amqp.Message{Header: &amqp.MessageHeader{}, Data: [][]byte{{1}}})},
		{"go-amqp empty properties", mustMarshal(&amqp.Message{Properties: &amqp.MessageProperties{}, Data: [][]byte{{1}}})},
		{"go-amqp empty maps", mustMarshal(&amqp.Message{
			DeliveryAnnotations: amqp.Annotations{}, Annotations: amqp.Annotations{},
			ApplicationProperties: map[string]any{}, Footer: amqp.Annotations{}, Data: [][]byte{{}},
		})},
		{"go-amqp value string", mustMarshal(&amqp.Message{Value: "a string body"})},
		{"go-amqp value null", mustMarshal(&amqp.Message{Value: amqp.Null{}})},
		{"go-amqp value int", mustMarshal(&amqp.Message{Value: int64(-5)})},
		{"go-amqp value map", mustMarshal(&amqp.Message{Value: map[string]any{
			"name": "n", "n": int32(3), "nested": map[string]any{"deep": []any{1, 2, map[string]any{"x": nil}}},
			"list": []any{"a", true, 2.5, []byte("b"), when, amqp.UUID{3}},
		}})},
		{"go-amqp value map any keys", mustMarshal(&amqp.Message{Value: map[any]any{
			int64(1): "one", "two": 2, uint32(3): nil, true: false, 2.5: "f", amqp.UUID{1}: "u", when: "t", nil: "n",
		}})},
		{"go-amqp value list", mustMarshal(&amqp.Message{Value: []any{"a", int8(1), uint16(2), []any{}, map[string]any{}}})},
		{"go-amqp value arrays", mustMarshal(&amqp.Message{Value: []any{
			[]int8{-1, 2}, []uint16{1, 2}, []int16{-3}, []uint32{1, 300}, []uint32{1, 2}, []int32{-1, 1000},
			[]int32{1}, []uint64{1, 1 << 40}, []uint64{2}, []int64{-1, 1 << 40}, []int64{1}, []float32{1.5},
			[]float64{2.5}, []bool{true, false}, []string{"a", "bb"}, []string{string(big)}, []amqp.Symbol{"s"},
			[][]byte{{1}, {}}, [][]byte{big}, []time.Time{when}, []amqp.UUID{{1}, {2}},
			[]map[any]any{{"k": "v"}, {int64(1): 2}}, []string{}, []int32{},
		}})},
		{"go-amqp value error", mustMarshal(&amqp.Message{Value: &amqp.Error{Condition: "amqp:internal-error"}})},
		{"go-amqp sequence", mustMarshal(&amqp.Message{Sequence: [][]any{{"a", int32(1)}, {}, {true, []any{nil}}}})},
		{"go-amqp value with footer", mustMarshal(&amqp.Message{Value: "v", Footer: amqp.Annotations{"x": uint64(1)}})},
		{"go-amqp large app-properties", mustMarshal(&amqp.Message{ApplicationProperties: manyProps(2000), Data: [][]byte{{1}}})},
		{"empty payload", nil},

		// The forms other peers write.
		{"proton header list8 smalluint", cat(
			sec(0x70, list8(vtrue, ubyte(4), smalluint(100), vfalse, uint0)),
			sec(0x75, bin8([]byte("body"))))},
		{"rabbitmq header uint delivery-count", cat(
			sec(0x70, list8(vfalse, null, null, null, vuint(2))),
			sec(0x75, bin32([]byte("body"))))},
		{"header ttl as ulong and uint", cat(
			sec(0x70, list8(null, null, vulong(1000))),
			sec(0x70, list8(null, null, vuint(1000))),
			sec(0x70, list8(null, null, smallulong(9))),
			sec(0x70, list32(null, null, []byte{0x60, 0, 1})),
			sec(0x77, null))},
		{"header list0", cat(sec(0x70, list0), sec(0x77, str8("v")))},
		{"proton properties", cat(
			sec(0x73, list8(str8("id-1"), null, str8("q"), null, null, null, sym8("text/plain"))),
			sec(0x74, map8(str8("k"), str8("v"), str8("n"), smallint(-1))),
			sec(0x77, str8("hello")))},
		{"rhea properties ulong id, str32 and sym32", cat(
			sec(0x73, list32(vulong(7), bin8([]byte("u")), str32("/queues/q"), str32("s"), str32("r"),
				uuid(1), sym32("application/json"), sym32("gzip"), timestamp(1), timestamp(-1),
				str32("g"), vuint(1), str32("rg"))),
			sec(0x77, str32("hello")))},
		{"properties uint0 group-sequence and ulong0 id", cat(
			sec(0x73, list8(ulong0, null, null, null, null, smallulong(1), null, null, null, null, null, uint0)),
			sec(0x75, bin8(nil)))},
		{"properties to as symbol", cat(sec(0x73, list8(null, null, sym8("q"))), sec(0x75, bin8(nil)))},
		{"rabbitmq annotations", cat(
			sec(0x72, map8(sym8("x-exchange"), str8(""), sym8("x-routing-key"), str8("rk"),
				sym8("x-opt-rabbitmq-received-time"), timestamp(1), sym8("x-delivery-count"), vlong(0))),
			sec(0x75, bin8([]byte("x"))))},
		{"annotations map32 sym32 and ulong keys", cat(
			sec(0x71, map32(sym32("x-opt-a"), vint(1), ulong0, null, smallulong(5), list0, vulong(9), map8())),
			sec(0x72, map32(sym8("x-opt-d"), descSym("com.example:thing", str8("v")))),
			sec(0x75, bin8(nil)))},
		{"proton app-properties every simple type", cat(
			sec(0x74, map32(
				str8("bool"), []byte{0x56, 0x01}, str8("t"), vtrue, str8("f"), vfalse,
				str8("ubyte"), ubyte(1), str8("ushort"), []byte{0x60, 0, 1}, str8("uint"), vuint(1),
				str8("smalluint"), smalluint(1), str8("uint0"), uint0, str8("ulong"), vulong(1),
				str8("smallulong"), smallulong(1), str8("ulong0"), ulong0, str8("byte"), []byte{0x51, 0xff},
				str8("short"), []byte{0x61, 0xff, 0xfe}, str8("int"), vint(-1), str8("smallint"), smallint(-1),
				str8("long"), vlong(-1), str8("smalllong"), smalllong(-1), str8("float"), []byte{0x72, 0, 0, 0, 0},
				str8("double"), vdouble(0), str8("timestamp"), timestamp(5), str8("uuid"), uuid(2),
				str8("binary"), bin8([]byte{1}), str8("binary32"), bin32([]byte{1}), str8("string"), str8("s"),
				str32("str32 key"), str32("s"), str8("symbol"), sym8("s"), sym8("symbol key"), sym32("s"),
				str8("null"), null)),
			sec(0x75, bin8(nil)))},
		{"app-properties null section", cat(sec(0x74, null), sec(0x75, null))},
		{"rabbitmq 4 dead-lettered: x-opt-deaths array of maps", cat(
			sec(0x72, map32(
				sym8("x-first-death-queue"), str8("q1"), sym8("x-first-death-reason"), sym8("rejected"),
				sym8("x-opt-deaths"), array32(0xd1, 2, cat(
					deathMap32("q1", "rejected", []string{"rk"}),
					deathMap32("q2", "expired", nil))))),
			sec(0x73, list8(str8("id"))),
			sec(0x75, bin8([]byte("body"))))},
		{"proton symbol arrays", cat(
			sec(0x72, map8(sym8("x-opt-caps"), symArray8("a", "bb", "ccc"),
				sym8("x-opt-caps32"), array32(0xb3, 2, cat(u32(1), []byte("a"), u32(0))))),
			sec(0x77, array8(0xa1, 2, cat([]byte{1, 'x', 0}))))},
		{"arrays of every element type", cat(sec(0x77, list32(
			array8(0x50, 2, []byte{1, 2}), array8(0x51, 1, []byte{0xff}), array8(0x60, 1, []byte{0, 1}),
			array8(0x61, 1, []byte{0, 1}), array8(0x43, 1, nil), array8(0x52, 2, []byte{1, 2}),
			array8(0x70, 1, u32(1)), array8(0x54, 1, []byte{1}), array8(0x71, 1, u32(1)),
			array8(0x44, 1, nil), array8(0x53, 1, []byte{1}), array8(0x80, 1, u64(1)),
			array8(0x55, 1, []byte{1}), array8(0x81, 1, u64(1)), array8(0x72, 1, u32(1)),
			array8(0x82, 1, u64(1)), array8(0x56, 2, []byte{0, 1}), array8(0x41, 1, nil),
			array8(0x42, 1, nil), array8(0x83, 1, u64(1)), array8(0x98, 1, make([]byte, 16)),
			array8(0xa0, 1, []byte{1, 9}), array32(0xb0, 1, cat(u32(1), []byte{9})),
			array8(0xa1, 0, nil), array32(0x70, 0, nil),
			array8(0xc1, 2, []byte{3, 2, 0x41, 0x40, 1, 0}),
			array32(0xd1, 1, cat(u32(8), u32(2), sym8("k"), null)),
		)))},
		{"list8 list32 map8 map32 in a value", sec(0x77, map32(
			str8("l8"), list8(smalluint(1)), str8("l32"), list32(smalluint(1)), str8("m8"), map8(uint0, null),
			str8("m32"), map32(smallint(1), str8("v")), smalllong(-1), null, ubyte(1), vtrue,
			timestamp(9), uuid(1), vdouble(3), list0))},
		{"described values proton decodes", cat(
			sec(0x77, list8(
				descSym("com.example:point", list8(vint(1), vint(2))),
				desc(0x99, str8("x")),
				cat([]byte{0x00, 0x80}, u64(0x0000_0137_0000_0001), map8(sym8("a"), null)),
				cat([]byte{0x00, 0x44}, null),
				desc(0x2b, list0), desc(0x2c, list8()),
				desc(0x1d, list8(sym8("amqp:not-found"), str8("gone"), map8(sym8("k"), vint(1)))),
				desc(0x1d, list8(str8("c"))),
				desc(0x21, null),
			)))},
		{"sections as full ulongs", cat(
			secLong(0x70, list0), secLong(0x72, map8()), secLong(0x73, list0),
			secLong(0x74, map8()), secLong(0x75, bin8([]byte{1})), secLong(0x78, null))},
		{"proton amqp-sequence list8", cat(sec(0x76, list8(smallint(1), str8("a"))), sec(0x76, list0))},
		{"amqp-sequence null", sec(0x76, null)},
		{"data null", sec(0x75, null)},
		{"repeated and reordered sections", cat(
			sec(0x75, bin8([]byte{1})), sec(0x70, list0), sec(0x73, list0), sec(0x73, list8(str8("id"))),
			sec(0x77, vtrue), sec(0x76, list0), sec(0x75, bin8(nil)), sec(0x78, map8()), sec(0x72, null))},
		{"nesting of 32", nested(32, list8)},
		{"uint0 and true arrays of one", sec(0x77, list8(array8(0x43, 1, nil), array32(0x41, 1, nil)))},
	}
	return out
}

// nested wraps null in n lists (or maps, depending on wrap) in an
// amqp-value section.
func nested(n int, wrap func(...[]byte) []byte) []byte {
	v := null
	for range n {
		v = wrap(v)
	}
	return sec(0x77, v)
}

func manyProps(n int) map[string]any {
	m := make(map[string]any, n)
	for i := range n {
		m[strings.Repeat("k", i%50)+string(rune('a'+i%26))+string(rune('0'+i%10))+strings.Repeat("-", i/260)] = int64(i)
	}
	return m
}

type hostile struct {
	name    string
	payload []byte
	lim     Limits
	reason  string // a part of the Reason Check must give
	// what go-amqp does with it: "panic", "error", "ok" where Check's
	// rejection is policy (a limit, the spec) rather than go-amqp's, or ""
	// where it must not be run in-process (it would crash the test binary).
	goamqp string
}

// smallNormal is a short message whose truncations the tests try.
var smallNormal = cat(
	sec(0x70, list8(vtrue)),
	sec(0x73, list8(str8("id"), null, str8("q"))),
	sec(0x74, map8(str8("k"), smallint(1))),
	sec(0x77, map8(str8("a"), list8(uint0, str8("b")))))

func hostileMessages() []hostile {
	body := sec(0x75, bin8([]byte("innocent")))
	return []hostile{
		// Defect 1: panics in go-amqp.
		{"footer with list key", cat(body, sec(0x78, map8(list8(smalluint(1)), str8("v")))), Limits{}, "list key in footer", "panic"},
		{"footer with list0 key", cat(body, sec(0x78, map8(list0, str8("v")))), Limits{}, "list key in footer", "panic"},
		{"footer with binary key", cat(body, sec(0x78, map8(bin8([]byte("k")), str8("v")))), Limits{}, "binary key in footer", "panic"},
		{"message-annotations with map key", cat(sec(0x72, map8(map8(sym8("a"), null), vtrue)), body), Limits{}, "map key in message-annotations", "panic"},
		{"delivery-annotations with array key", cat(sec(0x71, map8(symArray8("a"), vtrue)), body), Limits{}, "array key in delivery-annotations", "panic"},
		{"message-annotations with described list key", cat(sec(0x72, map8(descSym("k", list0), vtrue)), body), Limits{}, "described key in message-annotations", "panic"},
		{"amqp-value map with described binary key", sec(0x77, map8(desc(0x99, bin8([]byte{1})), vtrue)), Limits{}, "described key in amqp-value", "panic"},
		{"1.1 million nested maps", nestedMaps(1_100_000), Limits{}, "nesting deeper than 32", ""},

		// Defect 2: errors in go-amqp, which ended the link.
		{"char application-property", cat(sec(0x74, map8(str8("c"), cat([]byte{0x73}, u32('x')))), body), Limits{}, "char value in application-properties", "error"},
		{"decimal32 application-property", cat(sec(0x74, map8(str8("d"), cat([]byte{0x74}, u32(1)))), body), Limits{}, "decimal32 value in application-properties", "error"},
		{"decimal64 application-property", cat(sec(0x74, map8(str8("d"), cat([]byte{0x84}, u64(1)))), body), Limits{}, "decimal64 value in application-properties", "error"},
		{"decimal128 application-property", cat(sec(0x74, map8(str8("d"), cat([]byte{0x94}, u64(1), u64(2)))), body), Limits{}, "decimal128 value in application-properties", "error"},
		{"map body with list keys", sec(0x77, map8(list8(smalluint(1)), str8("v"))), Limits{}, "list key in amqp-value", "error"},
		{"map body with binary keys", sec(0x77, map8(bin8([]byte{1}), str8("v"))), Limits{}, "binary key in amqp-value", "error"},
		{"map body with map keys", sec(0x77, map8(map8(), str8("v"))), Limits{}, "map key in amqp-value", "error"},
		{"over the size limit", sec(0x75, bin32(make([]byte, 17_000_000-8))), Limits{MaxSize: 16 << 20}, "message of 17000000 bytes over the 16777216-byte limit", "ok"},
		{"application-properties with int key", cat(sec(0x74, map8(smallint(1), str8("v"))), body), Limits{}, "int key in application-properties", "error"},
		{"application-properties with null key", cat(sec(0x74, map8(null, str8("v"))), body), Limits{}, "null key in application-properties", "error"},
		{"char in a list body", sec(0x77, list8(cat([]byte{0x73}, u32('x')))), Limits{}, "char value in amqp-value", "error"},
		{"unknown constructor", sec(0x77, []byte{0x57, 0}), Limits{}, "unknown type 0x57 in amqp-value", "error"},
		{"reserved constructor", sec(0x77, []byte{0xff}), Limits{}, "unknown type 0xff in amqp-value", "error"},

		// Giant counts and sizes.
		{"list32 claiming 2^31 elements in 10 bytes", sec(0x77, cat([]byte{0xd0}, u32(5), u32(1<<31), null)), Limits{}, "list of 2147483648 elements", "error"},
		{"list32 over go-amqp's count", sec(0x77, cat([]byte{0xd0}, u32(5), u32(70000), null)), Limits{}, "over go-amqp's 65536", "error"},
		{"list32 count over its size", sec(0x77, cat([]byte{0xd0}, u32(5), u32(1000), null)), Limits{}, "list of 1000 elements in 5 bytes", "error"},
		{"list32 size past the end", sec(0x77, cat([]byte{0xd0}, u32(1<<30), u32(1), null)), Limits{}, "list of 1073741824 bytes past the end", "error"},
		{"map32 claiming 2^32-2 entries", sec(0x77, cat([]byte{0xd1}, u32(4), u32(1<<32-2))), Limits{}, "map of 4294967294 elements", "error"},
		{"map8 count over its size", sec(0x77, []byte{0xc1, 1, 200}), Limits{}, "map of 200 elements in 1 bytes", "error"},
		{"array32 of uint0 claiming 2^31", sec(0x77, cat([]byte{0xf0}, u32(5), u32(1<<31), []byte{0x43})), Limits{}, "array of 2147483648 elements", "error"},
		{"array8 of uint0 claiming 255", sec(0x77, []byte{0xe0, 2, 255, 0x43}), Limits{}, "array of 255 elements in 2 bytes", "error"},
		{"array8 of true claiming 2", sec(0x77, []byte{0xe0, 2, 2, 0x41}), Limits{}, "array of 2 elements in 2 bytes", "error"},
		{"array32 of uint0 padded", cat(sec(0x77, cat([]byte{0xf0}, u32(1000), u32(990), []byte{0x43})), bytes.Repeat([]byte{0x40}, 995)), Limits{}, "array size does not match its contents", "error"},
		{"array8 of 3 empty strings at the end", sec(0x77, []byte{0xe0, 5, 3, 0xa1, 0, 0, 0}), Limits{}, "array of 3 string past the end", "error"},
		{"binary32 of 4 GiB", sec(0x75, cat([]byte{0xb0}, u32(1<<32-1), []byte("x"))), Limits{}, "binary of 4294967295 bytes past the end in data", "error"},
		{"str32 of 2 GiB", sec(0x77, cat([]byte{0xb1}, u32(1<<31), []byte("x"))), Limits{}, "string of 2147483648 bytes past the end", "error"},

		// Arrays go-amqp cannot decode.
		{"array of char", sec(0x77, array8(0x73, 1, u32('x'))), Limits{}, "array of char", "error"},
		{"array of lists", sec(0x77, array8(0xc0, 1, []byte{1, 0})), Limits{}, "array of list", "error"},
		{"array of arrays", sec(0x77, array8(0xe0, 1, []byte{2, 0, 0x43})), Limits{}, "array of array", "error"},
		{"array of described", sec(0x77, array8(0x00, 1, []byte{0x53, 1, 0x43})), Limits{}, "array of described", "error"},
		{"array of null", sec(0x77, array8(0x40, 1, nil)), Limits{}, "array of null", "error"},
		{"array of decimal64", sec(0x77, array8(0x84, 1, u64(0))), Limits{}, "array of decimal64", "error"},

		// Section order and shape.
		{"unknown section", sec(0x79, null), Limits{}, "unknown section 0x79", "error"},
		{"section descriptor ulong0", []byte{0x00, 0x44, 0x40}, Limits{}, "section descriptor of type ulong", "error"},
		{"symbolic section descriptor", cat([]byte{0x00}, sym8("amqp:data:binary"), bin8(nil)), Limits{}, "section descriptor of type symbol", "error"},
		{"section that is not described", str8("x"), Limits{}, "string where a section belongs", "error"},
		{"section descriptor cut", []byte{0x00, 0x53}, Limits{}, "truncated section descriptor", "error"},
		{"section without value", []byte{0x00, 0x53, 0x77}, Limits{}, "missing value in amqp-value", "error"},
		{"header null", sec(0x70, null), Limits{}, "header of type null", "error"},
		{"header as map", sec(0x70, map8()), Limits{}, "header of type map", "error"},
		{"header with 6 fields", sec(0x70, list8(null, null, null, null, null, null)), Limits{}, "header with 6 fields", "error"},
		{"header durable as uint", sec(0x70, list8(smalluint(1))), Limits{}, "durable of type uint in header", "error"},
		{"header priority as uint", sec(0x70, list8(null, smalluint(1))), Limits{}, "priority of type uint in header", "error"},
		{"header ttl as int", sec(0x70, list8(null, null, vint(1))), Limits{}, "ttl of type int in header", "error"},
		{"header delivery-count as ulong", sec(0x70, list8(null, null, null, null, smallulong(1))), Limits{}, "delivery-count of type ulong in header", "error"},
		{"properties with 14 fields", sec(0x73, list32(null, null, null, null, null, null, null, null, null, null, null, null, null, null)), Limits{}, "properties with 14 fields", "error"},
		{"properties user-id as string", sec(0x73, list8(null, str8("u"))), Limits{}, "user-id of type string in properties", "error"},
		{"properties to as binary", sec(0x73, list8(null, null, bin8([]byte("q")))), Limits{}, "to of type binary in properties", "error"},
		{"properties creation-time as long", sec(0x73, list8(null, null, null, null, null, null, null, null, null, vlong(1))), Limits{}, "creation-time of type long in properties", "error"},
		{"properties group-sequence as ulong", sec(0x73, list8(null, null, null, null, null, null, null, null, null, null, null, vulong(1))), Limits{}, "group-sequence of type ulong in properties", "error"},
		{"properties as list of wrong size", sec(0x73, []byte{0xc0, 3, 1, 0x40}), Limits{}, "properties of 3 bytes past the end", "error"},
		{"data as string", sec(0x75, str8("x")), Limits{}, "string where binary belongs in data", "error"},
		{"amqp-sequence as array", sec(0x76, symArray8("a")), Limits{}, "array where a list belongs in amqp-sequence", "error"},
		{"message-annotations as list", sec(0x72, list0), Limits{}, "list where a map belongs in message-annotations", "error"},
		{"map with odd count", sec(0x77, []byte{0xc1, 2, 1, 0x40}), Limits{}, "map of odd count 1", "error"},
		{"error without condition", sec(0x77, desc(0x1d, list8(null))), Limits{}, "error without condition", "error"},
		{"error condition as int", sec(0x77, desc(0x1d, list8(vint(1)))), Limits{}, "condition of type int in amqp-value", "error"},
		{"error of no fields", sec(0x77, desc(0x1d, list0)), Limits{}, "error without condition", "error"},
		{"lifetime policy with fields", sec(0x77, desc(0x2b, list8(null))), Limits{}, "lifetime-policy with 1 fields", "error"},
		{"described transfer", sec(0x77, desc(0x14, list0)), Limits{}, "described 0x14", "error"},
		{"described section", sec(0x77, desc(0x75, bin8(nil))), Limits{}, "described 0x75", "error"},
		{"nesting of 33 lists", nested(33, list8), Limits{}, "nesting deeper than 32", "ok"},
		{"nesting over a lower limit", nested(5, list8), Limits{MaxDepth: 4}, "nesting deeper than 4", "ok"},
	}
}

// deathMap32 is one element (no constructor) of RabbitMQ's x-opt-deaths
// array: a map32 with symbol keys.
func deathMap32(queue, reason string, keys []string) []byte {
	var rks []byte
	for _, k := range keys {
		rks = cat(rks, u32(uint32(len(k))), []byte(k))
	}
	body := cat(
		sym8("queue"), str8(queue), sym8("reason"), sym8(reason), sym8("count"), vulong(1),
		sym8("first-time"), timestamp(1), sym8("last-time"), timestamp(2),
		sym8("exchange"), str8(""), sym8("routing-keys"), array32(0xb1, len(keys), rks),
		sym8("ttl"), vuint(1000))
	return cat(u32(uint32(len(body)+4)), u32(16), body)
}

// A lax client's string keys in annotations and the footer are off the spec
// but harmless to go-amqp: the message is delivered, not rejected.
func TestStringAnnotationKeysPass(t *testing.T) {
	for _, p := range [][]byte{
		cat(sec(0x72, map8(str8("k"), str8("v"))), sec(0x77, str8("x"))),
		cat(sec(0x77, str8("x")), sec(0x78, map8(str8("k"), null))),
	} {
		if err := Check(p, Limits{}); err != nil {
			t.Fatalf("Check: %v", err)
		}
		if err := (&amqp.Message{}).UnmarshalBinary(p); err != nil {
			t.Fatalf("go-amqp: %v", err)
		}
	}
}
