package protocol

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/messages"
	"github.com/stretchr/testify/require"
)

func convStrp(s string) *string { return &s }

func convTimep(t time.Time) *time.Time { return &t }

func convU32p(n uint32) *uint32 { return &n }

// wireRoundTrip sends m through the real wire encoding and back.
func wireRoundTrip(t testing.TB, m *messages.Message) *messages.Message {
	t.Helper()
	am, err := ToAMQP(m)
	require.NoError(t, err)
	bin, err := am.MarshalBinary()
	require.NoError(t, err)
	var back amqp.Message
	require.NoError(t, back.UnmarshalBinary(bin))
	return FromAMQP(&back)
}

var (
	testUUID    = amqp.UUID{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x0f, 0xed, 0xcb, 0xa9, 0x87, 0x65, 0x43, 0x21}
	testTime    = time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.FixedZone("X", 3600))
	testTimeUTC = time.UnixMilli(testTime.UnixMilli()).UTC()
)

func TestToAMQPFields(t *testing.T) {
	headers := map[string]any{"k": "v", "n": int64(1)}
	tests := []struct {
		name string
		in   messages.Message
		want amqp.Message
	}{
		{"empty message is one empty data section", messages.Message{}, amqp.Message{Data: [][]byte{nil}}},
		{"body", messages.Message{Body: []byte("hi")}, amqp.Message{Data: [][]byte{[]byte("hi")}}},
		{"value", messages.Message{Value: map[string]any{"a": int64(1)}}, amqp.Message{Value: map[string]any{"a": int64(1)}}},
		{"body wins over value", messages.Message{Body: []byte("b"), Value: "v"}, amqp.Message{Data: [][]byte{[]byte("b")}}},

		{"message-id string", messages.Message{MessageID: "id"}, withProps(amqp.MessageProperties{MessageID: "id"})},
		{"message-id uint64", messages.Message{MessageID: uint64(7)}, withProps(amqp.MessageProperties{MessageID: uint64(7)})},
		{"message-id uuid", messages.Message{MessageID: testUUID}, withProps(amqp.MessageProperties{MessageID: testUUID})},
		{"message-id binary", messages.Message{MessageID: []byte{1}}, withProps(amqp.MessageProperties{MessageID: []byte{1}})},
		{"correlation-id", messages.Message{CorrelationID: "c"}, withProps(amqp.MessageProperties{CorrelationID: "c"})},
		{"content-type", messages.Message{ContentType: "application/json"}, withProps(amqp.MessageProperties{ContentType: convStrp("application/json")})},
		{"content-encoding", messages.Message{ContentEncoding: "gzip"}, withProps(amqp.MessageProperties{ContentEncoding: convStrp("gzip")})},
		{"reply-to", messages.Message{ReplyTo: "r"}, withProps(amqp.MessageProperties{ReplyTo: convStrp("r")})},
		{"subject", messages.Message{Subject: "s"}, withProps(amqp.MessageProperties{Subject: convStrp("s")})},
		{"to", messages.Message{To: "t"}, withProps(amqp.MessageProperties{To: convStrp("t")})},
		{"group-id", messages.Message{GroupID: "g"}, withProps(amqp.MessageProperties{GroupID: convStrp("g")})},
		{"reply-to-group-id", messages.Message{ReplyToGroupID: "rg"}, withProps(amqp.MessageProperties{ReplyToGroupID: convStrp("rg")})},
		{"user-id", messages.Message{UserID: []byte("u")}, withProps(amqp.MessageProperties{UserID: []byte("u")})},
		{"empty user-id is absent", messages.Message{UserID: []byte{}}, amqp.Message{Data: [][]byte{nil}}},
		{"creation-time", messages.Message{CreationTime: testTime}, withProps(amqp.MessageProperties{CreationTime: convTimep(testTime)})},
		{"absolute-expiry-time", messages.Message{AbsoluteExpiryTime: testTime}, withProps(amqp.MessageProperties{AbsoluteExpiryTime: convTimep(testTime)})},
		{"group-sequence", messages.Message{GroupSequence: 3}, withProps(amqp.MessageProperties{GroupSequence: convU32p(3)})},

		{"headers", messages.Message{Headers: headers}, amqp.Message{Data: [][]byte{nil}, ApplicationProperties: headers}},
		{"empty headers are absent", messages.Message{Headers: map[string]any{}}, amqp.Message{Data: [][]byte{nil}}},

		{"durable", messages.Message{Durable: true}, withHeader(amqp.MessageHeader{Priority: 4})},
		{"transient", messages.Message{Transient: true}, amqp.Message{Data: [][]byte{nil}, Header: &amqp.MessageHeader{Priority: 4}}},
		{"durable wins over transient", messages.Message{Durable: true, Transient: true}, withHeader(amqp.MessageHeader{Priority: 4})},
		{"priority 0 is not set", messages.Message{Priority: 0}, amqp.Message{Data: [][]byte{nil}}},
		{"priority 4 is the default", messages.Message{Priority: 4}, amqp.Message{Data: [][]byte{nil}}},
		{"priority 9", messages.Message{Priority: 9}, withHeader(amqp.MessageHeader{Priority: 9})},
		{"priority 1", messages.Message{Priority: 1}, withHeader(amqp.MessageHeader{Priority: 1})},
		{"ttl", messages.Message{TTL: 1500 * time.Millisecond}, withHeader(amqp.MessageHeader{Priority: 4, TTL: 1500 * time.Millisecond})},
		{"ttl rounds up to ms", messages.Message{TTL: 1500 * time.Microsecond}, withHeader(amqp.MessageHeader{Priority: 4, TTL: 2 * time.Millisecond})},
		{"ttl below 1ms is 1ms", messages.Message{TTL: 1}, withHeader(amqp.MessageHeader{Priority: 4, TTL: time.Millisecond})},
		{"first-acquirer", messages.Message{FirstAcquirer: true}, withHeader(amqp.MessageHeader{Priority: 4, FirstAcquirer: true})},
		{"delivery-count", messages.Message{DeliveryCount: 2}, withHeader(amqp.MessageHeader{Priority: 4, DeliveryCount: 2})},

		{"annotations", messages.Message{Annotations: map[string]any{"x-opt-a": "v"}}, amqp.Message{Data: [][]byte{nil}, Annotations: amqp.Annotations{"x-opt-a": "v"}}},
		{"delivery annotations", messages.Message{DeliveryAnnotations: map[string]any{"d": int64(1)}}, amqp.Message{Data: [][]byte{nil}, DeliveryAnnotations: amqp.Annotations{"d": int64(1)}}},
		{"footer", messages.Message{Footer: map[string]any{"sig": []byte{9}}}, amqp.Message{Data: [][]byte{nil}, Footer: amqp.Annotations{"sig": []byte{9}}}},
		{"empty annotations are absent", messages.Message{Annotations: map[string]any{}}, amqp.Message{Data: [][]byte{nil}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want.Header == nil {
				// Every message says whether it is durable (issue 28).
				tt.want.Header = &amqp.MessageHeader{Durable: true, Priority: 4}
			}
			got, err := ToAMQP(&tt.in)
			require.NoError(t, err)
			require.Equal(t, &tt.want, got)
			// and it must encode
			_, err = got.MarshalBinary()
			require.NoError(t, err)
		})
	}
}

func withProps(p amqp.MessageProperties) amqp.Message {
	return amqp.Message{Data: [][]byte{nil}, Properties: &p}
}

// withHeader is a message with header h, durable as every message is
// unless it asks to be transient.
func withHeader(h amqp.MessageHeader) amqp.Message {
	h.Durable = true
	return amqp.Message{Data: [][]byte{nil}, Header: &h}
}

func TestFromAMQPFields(t *testing.T) {
	tests := []struct {
		name string
		in   amqp.Message
		want messages.Message
	}{
		{"empty", amqp.Message{}, messages.Message{Priority: 4, Transient: true}},
		{"one data section", amqp.Message{Data: [][]byte{[]byte("ab")}}, messages.Message{Body: []byte("ab"), Priority: 4, Transient: true}},
		{"several data sections concatenate", amqp.Message{Data: [][]byte{[]byte("ab"), nil, []byte("cd")}}, messages.Message{Body: []byte("abcd"), Priority: 4, Transient: true}},
		{"amqp-value", amqp.Message{Value: "v"}, messages.Message{Value: "v", Priority: 4, Transient: true}},
		{"amqp-sequence", amqp.Message{Sequence: [][]any{{"a", int64(1)}}}, messages.Message{Value: []any{"a", int64(1)}, Priority: 4, Transient: true}},
		{"several amqp-sequences concatenate", amqp.Message{Sequence: [][]any{{"a"}, {"b", "c"}}}, messages.Message{Value: []any{"a", "b", "c"}, Priority: 4, Transient: true}},

		{"properties", amqp.Message{Properties: &amqp.MessageProperties{
			MessageID:          "m",
			UserID:             []byte("u"),
			To:                 convStrp("to"),
			Subject:            convStrp("subj"),
			ReplyTo:            convStrp("rt"),
			CorrelationID:      uint64(5),
			ContentType:        convStrp("text/plain"),
			ContentEncoding:    convStrp("gzip"),
			AbsoluteExpiryTime: convTimep(testTime),
			CreationTime:       convTimep(testTime),
			GroupID:            convStrp("g"),
			GroupSequence:      convU32p(8),
			ReplyToGroupID:     convStrp("rg"),
		}}, messages.Message{
			MessageID: "m", UserID: []byte("u"), To: "to", Subject: "subj", ReplyTo: "rt",
			CorrelationID: uint64(5), ContentType: "text/plain", ContentEncoding: "gzip",
			AbsoluteExpiryTime: testTime.UTC(), CreationTime: testTime.UTC(),
			GroupID: "g", GroupSequence: 8, ReplyToGroupID: "rg", Priority: 4, Transient: true,
		}},
		{"empty properties", amqp.Message{Properties: &amqp.MessageProperties{}}, messages.Message{Priority: 4, Transient: true}},
		{"odd message-id type passes through", amqp.Message{Properties: &amqp.MessageProperties{MessageID: int32(3)}}, messages.Message{MessageID: int32(3), Priority: 4, Transient: true}},

		{"application-properties", amqp.Message{ApplicationProperties: map[string]any{"k": "v"}}, messages.Message{Headers: map[string]any{"k": "v"}, Priority: 4, Transient: true}},
		{"empty application-properties", amqp.Message{ApplicationProperties: map[string]any{}}, messages.Message{Priority: 4, Transient: true}},

		{"header", amqp.Message{Header: &amqp.MessageHeader{Durable: true, Priority: 7, TTL: time.Second, FirstAcquirer: true, DeliveryCount: 3}},
			messages.Message{Durable: true, Priority: 7, TTL: time.Second, FirstAcquirer: true, DeliveryCount: 3}},
		{"header priority 0 is reported", amqp.Message{Header: &amqp.MessageHeader{Priority: 0}}, messages.Message{Priority: 0, Transient: true}},

		{"annotation keys", amqp.Message{Annotations: amqp.Annotations{
			"x-opt-s":          1,
			amqp.Symbol("sym"): 2,
			uint64(42):         3,
			int64(-1):          4,
			int(5):             5,
			int32(6):           6,
			uint32(7):          7,
			true:               8,
		}}, messages.Message{Annotations: map[string]any{"x-opt-s": 1, "sym": 2, "42": 3, "-1": 4, "5": 5, "6": 6, "7": 7, "true": 8}, Priority: 4, Transient: true}},
		{"delivery annotations", amqp.Message{DeliveryAnnotations: amqp.Annotations{"d": "v"}}, messages.Message{DeliveryAnnotations: map[string]any{"d": "v"}, Priority: 4, Transient: true}},
		{"footer", amqp.Message{Footer: amqp.Annotations{uint64(1): "v"}}, messages.Message{Footer: map[string]any{"1": "v"}, Priority: 4, Transient: true}},
		{"empty annotations", amqp.Message{Annotations: amqp.Annotations{}}, messages.Message{Priority: 4, Transient: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, &tt.want, FromAMQP(&tt.in))
			require.Equal(t, &tt.want, FromAMQPOwned(&tt.in))
		})
	}
	require.Nil(t, FromAMQP(nil))
	require.Nil(t, FromAMQPOwned(nil))
}

// TestFromAMQPOwnedCopiesTheBody: the transfer's data sections may be reused
// once settled, so the Message's Body is its own, whatever its size, and a
// handler appending to it never writes past it.
func TestFromAMQPOwnedCopiesTheBody(t *testing.T) {
	for _, n := range []int{0, 1, 128, 129, 512, 513, 70000} {
		data := bytes.Repeat([]byte{'x'}, n)
		am := &amqp.Message{Data: [][]byte{data}}
		m := FromAMQPOwned(am)
		require.Equal(t, data, m.Body, "size %d", n)
		require.NotNil(t, m.Body)
		require.Equal(t, n, cap(m.Body))
		clear(data)
		for _, c := range m.Body {
			require.Equal(t, byte('x'), c, "size %d", n)
		}
	}
	am := &amqp.Message{Data: [][]byte{[]byte("ab"), []byte("cd")}}
	m := FromAMQPOwned(am)
	copy(am.Data[0], "zz")
	require.Equal(t, []byte("abcd"), m.Body)
}

func TestPriorityRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		name    string
		in      messages.Message
		want    uint8
		wantHdr bool
	}{
		{"unset reads as the default", messages.Message{}, 4, true},
		{"unset with another header field", messages.Message{TTL: time.Second}, 4, true},
		{"explicit default", messages.Message{Priority: 4}, 4, true},
		{"low", messages.Message{Priority: 1}, 1, true},
		{"high", messages.Message{Priority: 9}, 9, true},
		{"max", messages.Message{Priority: 255}, 255, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			am, err := ToAMQP(&tt.in)
			require.NoError(t, err)
			require.Equal(t, tt.wantHdr, am.Header != nil)
			require.Equal(t, tt.want, wireRoundTrip(t, &tt.in).Priority)
		})
	}
}

// TestHeaderPrimitives sends every AMQP primitive go-amqp can encode as an
// application property and checks what a receiver decodes.
func TestHeaderPrimitives(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name string
		in   any
		want any // what comes back
	}{
		{"null", nil, nil},
		{"amqp.Null", amqp.Null{}, nil},
		{"true", true, true},
		{"false", false, false},
		{"ubyte", uint8(200), uint8(200)},
		{"ushort", uint16(60000), uint16(60000)},
		{"uint", uint32(4000000000), uint32(4000000000)},
		{"uint small", uint32(3), uint32(3)},
		{"uint zero", uint32(0), uint32(0)},
		{"ulong", uint64(math.MaxUint64), uint64(math.MaxUint64)},
		{"ulong small", uint64(3), uint64(3)},
		{"ulong zero", uint64(0), uint64(0)},
		{"Go uint is ulong", uint(9), uint64(9)},
		{"byte", int8(-100), int8(-100)},
		{"short", int16(-30000), int16(-30000)},
		{"int", int32(math.MinInt32), int32(math.MinInt32)},
		{"int small", int32(-3), int32(-3)},
		{"long", int64(math.MinInt64), int64(math.MinInt64)},
		{"long small", int64(100), int64(100)},
		{"Go int is long", int(-12345678), int64(-12345678)},
		{"float", float32(1.5), float32(1.5)},
		{"double", math.Pi, math.Pi},
		{"double inf", math.Inf(-1), math.Inf(-1)},
		{"string", "héllo", "héllo"},
		{"empty string", "", ""},
		{"long string", strings.Repeat("x", 300), strings.Repeat("x", 300)},
		{"symbol is decoded as string", amqp.Symbol("sym"), "sym"},
		{"binary", []byte{0, 1, 2}, []byte{0, 1, 2}},
		{"empty binary", []byte{}, []byte{}},
		{"long binary", make([]byte, 300), make([]byte, 300)},
		{"timestamp", now, time.UnixMilli(now.UnixMilli())},
		{"timestamp before 1970", time.Date(1900, 1, 1, 0, 0, 0, 999999, time.UTC), time.UnixMilli(time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())},
		{"uuid", testUUID, testUUID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := wireRoundTrip(t, &messages.Message{Headers: map[string]any{"h": tt.in}})
			require.Contains(t, got.Headers, "h")
			require.Equal(t, tt.want, got.Headers["h"])
			require.IsType(t, tt.want, got.Headers["h"])
		})
	}
}

// fullMessage sets every field.
func fullMessage() *messages.Message {
	return &messages.Message{
		Body:               []byte(`{"order":42}`),
		MessageID:          "msg-1",
		CorrelationID:      testUUID,
		ContentType:        "application/json",
		ContentEncoding:    "identity-free",
		ReplyTo:            "replies",
		Subject:            "order.created",
		To:                 "orders",
		GroupID:            "customer-7",
		ReplyToGroupID:     "rg",
		UserID:             []byte("guest"),
		CreationTime:       testTime,
		AbsoluteExpiryTime: testTime.Add(time.Hour),
		GroupSequence:      12,
		Headers: map[string]any{
			"str": "s", "int": 7, "i64": int64(-7), "u8": uint8(1), "f64": 2.5, "bool": true,
			"bin": []byte{1}, "sym": amqp.Symbol("y"), "uuid": testUUID, "nil": nil,
		},
		Durable:       true,
		Priority:      7,
		TTL:           90 * time.Second,
		FirstAcquirer: true,
		DeliveryCount: 3,
		Annotations: map[string]any{
			"x-opt-partition-key": "p",
			"x-opt-list":          []any{"a", 1, map[string]any{"k": uint(2)}},
			"x-opt-array":         []string{"a", "b"},
			"x-opt-map":           map[any]any{int64(1): "one"},
		},
		DeliveryAnnotations: map[string]any{"x-opt-d": int64(1)},
		Footer:              map[string]any{"sig": []byte("hmac")},
	}
}

// TestRoundTripWire: ToAMQP -> MarshalBinary -> UnmarshalBinary -> FromAMQP
// gives back every field, up to the documented normalisations.
func TestRoundTripWire(t *testing.T) {
	t.Run("every field", func(t *testing.T) {
		m := fullMessage()
		want := fullMessage()
		// normalisations
		want.CreationTime = testTimeUTC
		want.AbsoluteExpiryTime = time.UnixMilli(testTime.Add(time.Hour).UnixMilli()).UTC()
		want.Headers["int"] = int64(7)
		want.Headers["sym"] = "y"
		want.Annotations["x-opt-list"] = []any{"a", int64(1), map[string]any{"k": uint64(2)}}
		require.Equal(t, want, wireRoundTrip(t, m))
	})

	t.Run("ids", func(t *testing.T) {
		for _, id := range []any{"s", "", uint64(0), uint64(math.MaxUint64), testUUID, []byte("bin"), []byte{}} {
			got := wireRoundTrip(t, &messages.Message{MessageID: id, CorrelationID: id})
			require.Equal(t, id, got.MessageID)
			require.Equal(t, id, got.CorrelationID)
			require.IsType(t, id, got.MessageID)
		}
	})

	t.Run("value bodies", func(t *testing.T) {
		for _, v := range []any{"text", int64(5), []any{"a", int64(1)}, map[string]any{"k": "v"}, []byte("b")} {
			require.Equal(t, v, wireRoundTrip(t, &messages.Message{Value: v}).Value)
		}
	})

	t.Run("nil body reads back empty", func(t *testing.T) {
		got := wireRoundTrip(t, &messages.Message{})
		require.NotNil(t, got.Body)
		require.Empty(t, got.Body)
		require.Nil(t, got.Value)
	})

	t.Run("ttl", func(t *testing.T) {
		for _, tt := range []struct{ in, want time.Duration }{
			{0, 0}, {1, time.Millisecond}, {time.Millisecond, time.Millisecond},
			{1001 * time.Microsecond, 2 * time.Millisecond}, {convMaxTTL, convMaxTTL},
		} {
			require.Equal(t, tt.want, wireRoundTrip(t, &messages.Message{TTL: tt.in}).TTL, "TTL %v", tt.in)
		}
	})

	t.Run("times", func(t *testing.T) {
		for _, tm := range []time.Time{time.Unix(0, 0), time.UnixMilli(-1), time.UnixMilli(1), convMinTime, convMaxTime, time.Date(1, 1, 1, 0, 0, 0, 1e6, time.UTC)} {
			got := wireRoundTrip(t, &messages.Message{CreationTime: tm, AbsoluteExpiryTime: tm})
			want := time.UnixMilli(tm.UnixMilli()).UTC()
			require.Equal(t, want, got.CreationTime, "%v", tm)
			require.Equal(t, want, got.AbsoluteExpiryTime, "%v", tm)
		}
	})

	t.Run("ulong annotation keys from other clients", func(t *testing.T) {
		am := amqp.NewMessage(nil)
		am.Annotations = amqp.Annotations{uint64(42): "x", "x-opt-s": "y"}
		bin, err := am.MarshalBinary()
		if err != nil {
			// go-amqp cannot send ulong keys itself; build the section by hand.
			bin = handAnnotationsUlongKey()
		}
		var back amqp.Message
		require.NoError(t, back.UnmarshalBinary(bin))
		got := FromAMQP(&back)
		require.Equal(t, "x", got.Annotations["42"])
	})

	t.Run("RabbitMQ dead-letter history can be sent on", func(t *testing.T) {
		// x-opt-deaths is an array of maps with symbol keys.
		am := amqp.NewMessage([]byte("x"))
		am.Annotations = amqp.Annotations{"x-opt-deaths": []map[any]any{
			{amqp.Symbol("queue"): "q", amqp.Symbol("count"): uint64(2), amqp.Symbol("time"): testTime},
		}}
		bin, err := am.MarshalBinary()
		require.NoError(t, err)
		var back amqp.Message
		require.NoError(t, back.UnmarshalBinary(bin))
		m := FromAMQP(&back)
		require.Equal(t, wireRoundTrip(t, m).Annotations, m.Annotations)
	})

	t.Run("annotation keys go out as symbols", func(t *testing.T) {
		am, err := ToAMQP(&messages.Message{Annotations: map[string]any{"x-opt-k": "v"}})
		require.NoError(t, err)
		bin, err := am.MarshalBinary()
		require.NoError(t, err)
		require.Contains(t, string(bin), "\xa3\x07x-opt-k") // sym8, length 7
	})
}

// handAnnotationsUlongKey is a message-annotations section {ulong 42: "x"}
// followed by an empty data section.
func handAnnotationsUlongKey() []byte {
	items := []byte{0x53, 42, 0xa1, 1, 'x'} // smallulong 42, str8 "x"
	b := []byte{0x00, 0x53, 0x72, 0xc1, byte(len(items) + 1), 2}
	b = append(b, items...)
	return append(b, 0x00, 0x53, 0x75, 0xa0, 0x00)
}

// TestDescribedHeaderPassesThrough: a described value in application
// properties (as Azure Service Bus sends a DateTimeOffset) survives
// FromAMQP -> ToAMQP, so a received message can be sent on.
func TestDescribedHeaderPassesThrough(t *testing.T) {
	desc := "com.microsoft:datetime-offset"
	items := []byte{0xa1, 1, 'k', 0x00, 0xa3, byte(len(desc))}
	items = append(items, desc...)
	items = append(items, 0x81, 0, 0, 0, 0, 0, 0, 0, 42) // long 42
	bin := []byte{0x00, 0x53, 0x74, 0xc1, byte(len(items) + 1), 2}
	bin = append(bin, items...)
	bin = append(bin, 0x00, 0x53, 0x75, 0xa0, 0x00)

	var am amqp.Message
	require.NoError(t, am.UnmarshalBinary(bin))
	m := FromAMQP(&am)
	require.Contains(t, m.Headers, "k")

	out, err := ToAMQP(m)
	require.NoError(t, err)
	again, err := out.MarshalBinary()
	require.NoError(t, err)
	// Not byte-equal: go-amqp decodes the symbol descriptor as a string and
	// re-encodes it as one, and picks its own widths. What decodes is equal.
	var back amqp.Message
	require.NoError(t, back.UnmarshalBinary(again))
	require.Equal(t, m.Headers, FromAMQP(&back).Headers)
}

func TestToAMQPErrors(t *testing.T) {
	type custom struct{ A int }
	type myString string
	tests := []struct {
		name string
		in   messages.Message
		want []string // substrings of the error
	}{
		{"message-id int", messages.Message{MessageID: 5}, []string{"MessageID", "int"}},
		{"message-id symbol", messages.Message{MessageID: amqp.Symbol("s")}, []string{"MessageID", "encoding.Symbol"}},
		{"message-id float", messages.Message{MessageID: 1.5}, []string{"MessageID", "float64"}},
		{"correlation-id struct", messages.Message{CorrelationID: custom{}}, []string{"CorrelationID", "protocol.custom"}},
		{"correlation-id pointer", messages.Message{CorrelationID: convStrp("x")}, []string{"CorrelationID", "*string"}},
		{"message-id bad utf8", messages.Message{MessageID: "\xff"}, []string{"MessageID", "UTF-8"}},
		{"subject bad utf8", messages.Message{Subject: "a\xffb"}, []string{"Subject", "UTF-8"}},
		{"to bad utf8", messages.Message{To: "\xc3"}, []string{"To", "UTF-8"}},
		{"reply-to bad utf8", messages.Message{ReplyTo: "\xc3"}, []string{"ReplyTo", "UTF-8"}},
		{"group-id bad utf8", messages.Message{GroupID: "\xc3"}, []string{"GroupID", "UTF-8"}},
		{"reply-to-group-id bad utf8", messages.Message{ReplyToGroupID: "\xc3"}, []string{"ReplyToGroupID", "UTF-8"}},

		{"header struct", messages.Message{Headers: map[string]any{"bad-key": custom{}}}, []string{`"bad-key"`, "protocol.custom"}},
		{"header named string", messages.Message{Headers: map[string]any{"h": myString("x")}}, []string{`"h"`, "protocol.myString"}},
		{"header map", messages.Message{Headers: map[string]any{"m": map[string]any{}}}, []string{`"m"`, "map[string]interface {}", "not allowed"}},
		{"header list", messages.Message{Headers: map[string]any{"l": []any{1}}}, []string{`"l"`, "[]interface {}", "not allowed"}},
		{"header array", messages.Message{Headers: map[string]any{"a": []string{"x"}}}, []string{`"a"`, "[]string"}},
		{"header annotations", messages.Message{Headers: map[string]any{"a": amqp.Annotations{}}}, []string{`"a"`, "encoding.Annotations"}},
		{"header pointer", messages.Message{Headers: map[string]any{"p": new(int)}}, []string{`"p"`, "*int"}},
		{"header nil amqp error", messages.Message{Headers: map[string]any{"e": (*amqp.Error)(nil)}}, []string{`"e"`, "nil"}},
		{"header chan", messages.Message{Headers: map[string]any{"c": make(chan int)}}, []string{`"c"`, "chan int"}},
		{"header bad utf8 value", messages.Message{Headers: map[string]any{"s": "\xff"}}, []string{`"s"`, "UTF-8"}},
		{"header bad utf8 key", messages.Message{Headers: map[string]any{"\xff": "v"}}, []string{"key", "UTF-8"}},
		{"header time out of range", messages.Message{Headers: map[string]any{"t": convMaxTime.Add(time.Millisecond)}}, []string{`"t"`, "time.Time"}},

		{"ttl negative", messages.Message{TTL: -time.Second}, []string{"TTL"}},
		{"ttl too long", messages.Message{TTL: convMaxTTL + 1}, []string{"TTL"}},
		{"creation-time out of range", messages.Message{CreationTime: convMinTime.Add(-time.Nanosecond)}, []string{"CreationTime"}},
		{"absolute-expiry-time out of range", messages.Message{AbsoluteExpiryTime: convMaxTime.Add(time.Nanosecond)}, []string{"AbsoluteExpiryTime"}},

		{"annotation struct", messages.Message{Annotations: map[string]any{"x-a": custom{}}}, []string{"annotation", `"x-a"`, "protocol.custom"}},
		{"annotation nested", messages.Message{Annotations: map[string]any{"x-a": []any{1, []any{make(chan int)}}}}, []string{`"x-a"`, "chan int"}},
		{"annotation map key", messages.Message{Annotations: map[string]any{"x-a": map[any]any{custom{}: 1}}}, []string{`"x-a"`, "protocol.custom"}},
		{"delivery annotation", messages.Message{DeliveryAnnotations: map[string]any{"d": custom{}}}, []string{"delivery annotation", `"d"`}},
		{"footer", messages.Message{Footer: map[string]any{"f": custom{}}}, []string{"footer", `"f"`}},
		{"value", messages.Message{Value: custom{}}, []string{"Value", "protocol.custom"}},
		{"value bad utf8", messages.Message{Value: []string{"\xff"}}, []string{"Value", "UTF-8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			am, err := ToAMQP(&tt.in)
			require.Error(t, err)
			require.Nil(t, am)
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
	t.Run("nil message", func(t *testing.T) {
		_, err := ToAMQP(nil)
		require.Error(t, err)
	})
	t.Run("self-referencing list", func(t *testing.T) {
		l := []any{nil}
		l[0] = l
		_, err := ToAMQP(&messages.Message{Annotations: map[string]any{"x": l}})
		require.ErrorContains(t, err, "nesting")
	})
}

// TestFromAMQPOddInput feeds FromAMQP sections with unexpected shapes; it
// must pass them through without panicking.
func TestFromAMQPOddInput(t *testing.T) {
	require.NotPanics(t, func() {
		m := FromAMQP(&amqp.Message{
			Data:                  [][]byte{nil, nil},
			Value:                 amqp.Null{},
			Sequence:              [][]any{nil},
			Header:                nil,
			Properties:            &amqp.MessageProperties{MessageID: map[string]any{}, CorrelationID: []any{}},
			ApplicationProperties: map[string]any{"m": map[any]any{}},
			Annotations:           amqp.Annotations{nil: 1, 1.5: 2, struct{}{}: 3},
		})
		require.Empty(t, m.Body)
		require.Equal(t, amqp.Null{}, m.Value) // amqp-value wins over amqp-sequence
		require.Len(t, m.Annotations, 3)
	})
}

func BenchmarkToFromAMQP(b *testing.B) {
	m := &messages.Message{
		Body:          make([]byte, 100),
		MessageID:     "msg-0001",
		ContentType:   "application/json",
		GroupID:       "customer-7",
		CreationTime:  testTime,
		Headers:       map[string]any{"tenant": "acme", "attempt": int64(1)},
		Durable:       true,
		TTL:           time.Minute,
		DeliveryCount: 1,
	}
	b.Run("ToAMQP", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ToAMQP(m); err != nil {
				b.Fatal(err)
			}
		}
	})
	bodyOnly := &messages.Message{Body: make([]byte, 100)}
	b.Run("ToAMQP body only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ToAMQP(bodyOnly); err != nil {
				b.Fatal(err)
			}
		}
	})
	am, err := ToAMQP(m)
	require.NoError(b, err)
	b.Run("FromAMQP", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = FromAMQP(am)
		}
	})
	b.Run("both", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			am, err := ToAMQP(m)
			if err != nil {
				b.Fatal(err)
			}
			_ = FromAMQP(am)
		}
	})
	withAnn := *m
	withAnn.Annotations = map[string]any{"x-opt-partition-key": "p"}
	b.Run("both with annotation", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			am, err := ToAMQP(&withAnn)
			if err != nil {
				b.Fatal(err)
			}
			_ = FromAMQP(am)
		}
	})
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = wireRoundTrip(b, m)
		}
	})
}

// TestOutgoingKeepsNoPointerToTheMessage: the mapped message holds the
// property strings and times in its own memory, so a Message a caller
// publishes can stay on its stack (App.Publish allocates none), and a
// change to the Message after Map does not reach the mapped properties.
func TestOutgoingKeepsNoPointerToTheMessage(t *testing.T) {
	var o Outgoing
	body := []byte("body")
	allocs := testing.AllocsPerRun(100, func() {
		m := messages.Message{Body: body, Subject: "s", ContentType: "text/plain", To: "t",
			GroupSequence: 3, CreationTime: testTime, Priority: 7}
		if _, err := o.Map(&m); err != nil {
			panic(err)
		}
	})
	require.Zero(t, allocs)

	m := &messages.Message{Subject: "a", ReplyTo: "r", GroupSequence: 1, CreationTime: testTime}
	am, err := o.Map(m)
	require.NoError(t, err)
	m.Subject, m.ReplyTo, m.GroupSequence, m.CreationTime = "b", "x", 2, time.Time{}
	require.Equal(t, "a", *am.Properties.Subject)
	require.Equal(t, "r", *am.Properties.ReplyTo)
	require.Equal(t, uint32(1), *am.Properties.GroupSequence)
	require.Equal(t, testTime, *am.Properties.CreationTime)
}

// TestOutgoingReuseLeavesNothingBehind: Map into used memory gives what
// ToAMQP gives, whatever the message mapped before had.
func TestOutgoingReuseLeavesNothingBehind(t *testing.T) {
	var o Outgoing
	for _, m := range []*messages.Message{
		{Subject: "s", ReplyTo: "r", GroupSequence: 2, CreationTime: testTime, Body: []byte("a"), Priority: 9},
		{Body: []byte("b")},
		{To: "t", Value: "v"},
		{ContentType: "c", AbsoluteExpiryTime: testTime, TTL: time.Second},
		{},
	} {
		want, err := ToAMQP(m)
		require.NoError(t, err)
		got, err := o.Map(m)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
}
