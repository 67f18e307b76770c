package interop

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor"
)

// Fixed values of the messages the peers send.
var (
	creationTime = time.UnixMilli(1700000000123).UTC()
	expiryTime   = time.UnixMilli(4102444800456).UTC() // 2100: the broker must not expire it
	headerTime   = time.UnixMilli(1234567890123)
	uuidText     = "0f8fad5b-d9cb-469f-a165-70867728950e"
	uuidValue    = amqp.UUID{0x0f, 0x8f, 0xad, 0x5b, 0xd9, 0xcb, 0x46, 0x9f, 0xa1, 0x65, 0x70, 0x86, 0x77, 0x28, 0x95, 0x0e}
	uuid2Text    = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
	uuid2Value   = amqp.UUID{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
)

// inboundCase is one message a peer sends and exactly what amqpactor's
// Message shows of it.
type inboundCase struct {
	name string
	spec peerMsg
	want *amqpactor.Message
	// multi: the case needs more than one body section (rhea only).
	multi bool
}

// applicationProperties has one application-property of every AMQP
// primitive type, some in more than one encoding (a long that fits in a
// byte is sent as smalllong, a zero uint as uint0), each with the Go value
// that Message.Headers holds for it.
func applicationProperties() (map[string]tv, map[string]any) {
	type prop struct {
		sent tv
		got  any
	}
	props := map[string]prop{
		"string":       {tvStr("héllo ✓ wörld"), "héllo ✓ wörld"},
		"empty-string": {tvStr(""), ""},
		"symbol":       {tvSym("sym:bol"), "sym:bol"}, // a symbol arrives as a string
		"bool-true":    {tvBool(true), true},
		"bool-false":   {tvBool(false), false},
		"byte":         {tvNum("byte", math.MinInt8), int8(math.MinInt8)},
		"short":        {tvNum("short", math.MinInt16), int16(math.MinInt16)},
		"int":          {tvNum("int", math.MinInt32), int32(math.MinInt32)},
		"small-int":    {tvNum("int", -5), int32(-5)},
		"long":         {tvNum("long", int64(math.MinInt64)), int64(math.MinInt64)},
		"long-max":     {tvNum("long", int64(math.MaxInt64)), int64(math.MaxInt64)},
		"small-long":   {tvNum("long", 7), int64(7)},
		"ubyte":        {tvNum("ubyte", math.MaxUint8), uint8(math.MaxUint8)},
		"ushort":       {tvNum("ushort", math.MaxUint16), uint16(math.MaxUint16)},
		"uint":         {tvNum("uint", uint32(math.MaxUint32)), uint32(math.MaxUint32)},
		"uint-zero":    {tvNum("uint", 0), uint32(0)},
		"ulong":        {tvNum("ulong", uint64(math.MaxUint64)), uint64(math.MaxUint64)},
		"ulong-zero":   {tvNum("ulong", 0), uint64(0)},
		"small-ulong":  {tvNum("ulong", 200), uint64(200)},
		"float":        {tvNum("float", 1.5), float32(1.5)},
		"float-max":    {tvNum("float", math.MaxFloat32), float32(math.MaxFloat32)},
		"double":       {tvNum("double", 2.718281828459045), 2.718281828459045},
		"timestamp":    {tvTime(headerTime), headerTime},
		"uuid":         {tvUUID(uuidText), uuidValue},
		"binary":       {tvBin([]byte{0, 1, 2, 0xfe, 0xff}), []byte{0, 1, 2, 0xfe, 0xff}},
		"null":         {tvNull(), nil},
	}
	sent, got := map[string]tv{}, map[string]any{}
	for k, p := range props {
		sent[k], got[k] = p.sent, p.got
	}
	return sent, got
}

// messageAnnotations has annotations of several types, lists and maps
// included; keys are symbols, as the spec wants.
func messageAnnotations() ([]pair, map[string]any) {
	return []pair{
			{tvSym("x-opt-string"), tvStr("ann")},
			{tvSym("x-opt-symbol"), tvSym("ann-sym")},
			{tvSym("x-opt-long"), tvNum("long", 99)},
			{tvSym("x-opt-uint"), tvNum("uint", 5)},
			{tvSym("x-opt-uuid"), tvUUID(uuid2Text)},
			{tvSym("x-opt-list"), tvList(tvNum("int", 1), tvStr("a"))},
			{tvSym("x-opt-map"), tvMap(pair{tvStr("k"), tvBool(true)})},
		}, map[string]any{
			"x-opt-string": "ann",
			"x-opt-symbol": "ann-sym",
			"x-opt-long":   int64(99),
			"x-opt-uint":   uint32(5),
			"x-opt-uuid":   uuid2Value,
			"x-opt-list":   []any{int32(1), "a"},
			"x-opt-map":    map[string]any{"k": true},
		}
}

// fullSpec is a message with every properties field, every header field, an
// application-property of every primitive type, message annotations and a
// data body; fullWant is what Message shows of it.
func fullSpec(user, to, id string) peerMsg {
	ap, _ := applicationProperties()
	ma, _ := messageAnnotations()
	return peerMsg{
		Header: &peerHeader{Durable: ptr(true), Priority: ptr(7), TTL: ptr(int64(60000))},
		Properties: &peerProps{
			MessageID:          ptr(tvStr(id)),
			UserID:             []byte(user),
			To:                 ptr(to),
			Subject:            ptr("sübject"),
			ReplyTo:            ptr("/queues/somewhere-else"),
			CorrelationID:      ptr(tvNum("ulong", uint64(math.MaxUint64))),
			ContentType:        ptr("application/json"),
			ContentEncoding:    ptr("deflate"),
			AbsoluteExpiryTime: ptr(expiryTime.UnixMilli()),
			CreationTime:       ptr(creationTime.UnixMilli()),
			GroupID:            ptr("group-A"),
			GroupSequence:      ptr(uint32(math.MaxUint32)),
			ReplyToGroupID:     ptr("reply-group-B"),
		},
		ApplicationProperties: ap,
		MessageAnnotations:    ma,
		Body:                  dataBody([]byte(`{"full":true}`)),
	}
}

func fullWant(user, to, id string) *amqpactor.Message {
	_, ap := applicationProperties()
	_, ma := messageAnnotations()
	return &amqpactor.Message{
		Body:               []byte(`{"full":true}`),
		MessageID:          id,
		UserID:             []byte(user),
		To:                 to,
		Subject:            "sübject",
		ReplyTo:            "/queues/somewhere-else",
		CorrelationID:      uint64(math.MaxUint64),
		ContentType:        "application/json",
		ContentEncoding:    "deflate",
		AbsoluteExpiryTime: expiryTime,
		CreationTime:       creationTime,
		GroupID:            "group-A",
		GroupSequence:      math.MaxUint32,
		ReplyToGroupID:     "reply-group-B",
		Headers:            ap,
		Durable:            true,
		Priority:           7,
		TTL:                time.Minute,
		Annotations:        ma,
	}
}

// inboundCases are the messages a peer sends; each has its own message-id,
// by which the test finds it (the ids also cover every id type).
func inboundCases(user, to string) []inboundCase {
	withID := func(id tv, m peerMsg) peerMsg {
		if m.Properties == nil {
			m.Properties = &peerProps{}
		}
		m.Properties.MessageID = &id
		return m
	}
	return []inboundCase{
		{
			name: "every field, every application-property type, data body",
			spec: fullSpec(user, to, "full"),
			want: fullWant(user, to, "full"),
		},
		{
			name: "plain data body, nothing else",
			spec: withID(tvStr("plain"), peerMsg{Body: dataBody([]byte("just bytes"))}),
			want: &amqpactor.Message{MessageID: "plain", Body: []byte("just bytes"), Priority: 4},
		},
		{
			name: "empty data section",
			spec: withID(tvStr("empty-data"), peerMsg{Body: dataBody([]byte{})}),
			want: &amqpactor.Message{MessageID: "empty-data", Body: []byte{}, Priority: 4},
		},
		{
			name: "amqp-value string body, ulong message-id, uuid correlation-id",
			spec: withID(tvNum("ulong", 7), peerMsg{
				Header:     &peerHeader{Durable: ptr(false), Priority: ptr(0)},
				Properties: &peerProps{CorrelationID: ptr(tvUUID(uuid2Text))},
				Body:       valueBody(tvStr("a string value")),
			}),
			// A priority of 0 on the wire reads as 0 (an absent one as 4).
			want: &amqpactor.Message{MessageID: uint64(7), CorrelationID: uuid2Value, Value: "a string value", Priority: 0},
		},
		{
			name: "amqp-value map body, uuid message-id, binary correlation-id",
			spec: withID(tvUUID(uuidText), peerMsg{
				Properties: &peerProps{CorrelationID: ptr(tvBin([]byte("corr")))},
				Body: valueBody(tvMap(
					pair{tvStr("n"), tvNum("long", 1)},
					pair{tvSym("s"), tvList(tvNum("int", 2), tvStr("x"), tvNull())},
				)),
			}),
			want: &amqpactor.Message{MessageID: uuidValue, CorrelationID: []byte("corr"), Priority: 4,
				// symbol keys become strings: a map whose keys are all strings
				// or symbols is a map[string]any.
				Value: map[string]any{"n": int64(1), "s": []any{int32(2), "x", nil}}},
		},
		{
			name: "amqp-value map body with non-string keys",
			spec: withID(tvStr("value-map-any"), peerMsg{
				Body: valueBody(tvMap(pair{tvNum("ulong", 1), tvStr("one")}, pair{tvStr("two"), tvNum("ubyte", 2)})),
			}),
			want: &amqpactor.Message{MessageID: "value-map-any", Priority: 4,
				Value: map[any]any{uint64(1): "one", "two": uint8(2)}},
		},
		{
			name: "amqp-value binary body is a Value, not a Body",
			spec: withID(tvBin([]byte("bin-id")), peerMsg{Body: valueBody(tvBin([]byte{9, 8, 7}))}),
			want: &amqpactor.Message{MessageID: []byte("bin-id"), Value: []byte{9, 8, 7}, Priority: 4},
		},
		{
			name: "amqp-sequence body",
			spec: withID(tvStr("sequence"), peerMsg{
				Body: sequenceBody([]tv{tvNum("long", 1), tvStr("two"), tvBool(true), tvSym("four")}),
			}),
			want: &amqpactor.Message{MessageID: "sequence", Priority: 4,
				Value: []any{int64(1), "two", true, "four"}},
		},
		{
			name:  "two data sections are one Body",
			multi: true,
			spec:  withID(tvStr("multi-data"), peerMsg{Body: dataBody([]byte("first,"), []byte("second"))}),
			want:  &amqpactor.Message{MessageID: "multi-data", Body: []byte("first,second"), Priority: 4},
		},
		{
			name:  "two amqp-sequence sections are one Value",
			multi: true,
			spec: withID(tvStr("multi-sequence"), peerMsg{
				Body: sequenceBody([]tv{tvNum("int", 1)}, []tv{tvNum("int", 2), tvStr("3")}),
			}),
			want: &amqpactor.Message{MessageID: "multi-sequence", Priority: 4, Value: []any{int32(1), int32(2), "3"}},
		},
	}
}

func idKey(id any) string { return fmt.Sprintf("%T/%v", id, id) }

// TestPeerToAmqpactor: the peer sends messages with every section filled in
// and each body kind; an amqpactor subscription receives them, and Message
// shows each field exactly, with the documented type mapping.
// peerSends has the peer send every inbound case it can encode to queue q,
// and returns those cases.
func (e *env) peerSends(t *testing.T, q string) []inboundCase {
	t.Helper()
	var cases []inboundCase
	for _, c := range inboundCases(e.user, e.addr(q)) {
		if !c.multi || e.peer.multiSections {
			cases = append(cases, c)
		}
	}
	sp := make([]peerMsg, len(cases))
	for i, c := range cases {
		sp[i] = c.spec
	}
	var res peerResult
	e.peer.run(t, "send", e.peerEnv(e.addr(q), "PEER_MESSAGES", specs(sp...)), &res)
	if res.Sent != len(cases) {
		t.Fatalf("the peer sent %d messages, want %d", res.Sent, len(cases))
	}
	return cases
}

func TestPeerToAmqpactor(t *testing.T) {
	eachPeer(t, func(t *testing.T, e *env) {
		p := e.peer
		q := e.queue("inbound")
		h, wait := collect(t)
		e.app(func(app *amqpactor.App) {
			if _, err := app.Subscribe(amqpactor.Queue(q), h); err != nil {
				t.Fatalf("subscribe: %v", err)
			}
		})

		cases := e.peerSends(t, q)

		got := map[string]*amqpactor.Message{}
		for _, m := range wait(testContext(t, 30*time.Second), len(cases)) {
			got[idKey(m.MessageID)] = m
		}
		for _, c := range cases {
			m := got[idKey(c.want.MessageID)]
			if m == nil {
				t.Errorf("%s: no message with message-id %s arrived", c.name, show(c.want.MessageID))
				continue
			}
			for _, d := range diffMessage(e.viaBroker(c.want, q, e.stored(p, c.spec.Header)), m) {
				t.Errorf("%s: %s", c.name, d)
			}
		}
	})
}
