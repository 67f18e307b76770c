package interop

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor"
)

// goHeaders has a header of every Go type that Message.Headers may hold,
// each with the AMQP type (tagged value) that another client sees.
func goHeaders() (map[string]any, map[string]tv) {
	type h struct {
		goValue any
		seen    tv
	}
	hs := map[string]h{
		"string":  {"héllo ✓", tvStr("héllo ✓")},
		"symbol":  {amqp.Symbol("a:symbol"), tvSym("a:symbol")},
		"bool":    {true, tvBool(true)},
		"int":     {-5, tvNum("long", -5)}, // Go's int is 64 bits wide here
		"int8":    {int8(math.MinInt8), tvNum("byte", math.MinInt8)},
		"int16":   {int16(math.MinInt16), tvNum("short", math.MinInt16)},
		"int32":   {int32(math.MinInt32), tvNum("int", math.MinInt32)},
		"int64":   {int64(math.MinInt64), tvNum("long", int64(math.MinInt64))},
		"uint":    {uint(5), tvNum("ulong", 5)},
		"uint8":   {uint8(math.MaxUint8), tvNum("ubyte", math.MaxUint8)},
		"uint16":  {uint16(math.MaxUint16), tvNum("ushort", math.MaxUint16)},
		"uint32":  {uint32(math.MaxUint32), tvNum("uint", uint32(math.MaxUint32))},
		"uint64":  {uint64(math.MaxUint64), tvNum("ulong", uint64(math.MaxUint64))},
		"float32": {float32(0.1), tvNum("float", float32(0.1))},
		"float64": {math.Pi, tvNum("double", math.Pi)},
		"time":    {headerTime, tvTime(headerTime)},
		"uuid":    {uuidValue, tvUUID(uuidText)},
		"bytes":   {[]byte{0, 0xff}, tvBin([]byte{0, 0xff})},
		"nil":     {nil, tvNull()},
		"null":    {amqp.Null{}, tvNull()},
	}
	goValues, seen := map[string]any{}, map[string]tv{}
	for k, v := range hs {
		goValues[k], seen[k] = v.goValue, v.seen
	}
	return goValues, seen
}

// outboundCase is a Message amqpactor publishes and what the peer must see
// of it, sections as the peer prints them (env.brokerAnnotations and the
// header fields RabbitMQ sets are added by the test).
type outboundCase struct {
	name string
	msg  *amqpactor.Message
	// header: durable and ttl as the peer must see them (priority in
	// priority); the broker sets first-acquirer.
	durable  bool
	priority int
	ttl      *int64
	props    *peerProps // nil: no properties section (every field absent)
	appProps map[string]tv
	// annotations: message annotations besides the broker's.
	annotations []pair
	body        *peerBody
	// sections the message has on the wire, for a peer that shows them.
	sections []string
}

// outboundCases are the messages amqpactor publishes to the queue that a
// peer addresses as to.
func outboundCases(user, to string) []outboundCase {
	headers, seen := goHeaders()
	all := []string{"header", "message-annotations", "properties", "application-properties", "data"}
	return []outboundCase{
		{
			name: "every field and a header of every Go type",
			msg: &amqpactor.Message{
				Body:               []byte(`{"order":7}`),
				MessageID:          "amqpactor-full",
				CorrelationID:      uint64(42),
				ContentType:        "application/json",
				ContentEncoding:    "deflate",
				ReplyTo:            "/queues/replies",
				Subject:            "ördered",
				To:                 to,
				GroupID:            "customer-7",
				ReplyToGroupID:     "reply-group",
				UserID:             []byte(user),
				CreationTime:       creationTime,
				AbsoluteExpiryTime: expiryTime,
				GroupSequence:      3,
				Headers:            headers,
				Durable:            true,
				Priority:           9,
				TTL:                90 * time.Second,
			},
			durable:  true,
			priority: 9,
			ttl:      ptr(int64(90000)),
			props: &peerProps{
				MessageID:          ptr(tvStr("amqpactor-full")),
				UserID:             []byte(user),
				To:                 ptr(to),
				Subject:            ptr("ördered"),
				ReplyTo:            ptr("/queues/replies"),
				CorrelationID:      ptr(tvNum("ulong", 42)),
				ContentType:        ptr("application/json"),
				ContentEncoding:    ptr("deflate"),
				AbsoluteExpiryTime: ptr(expiryTime.UnixMilli()),
				CreationTime:       ptr(creationTime.UnixMilli()),
				GroupID:            ptr("customer-7"),
				GroupSequence:      ptr(uint32(3)),
				ReplyToGroupID:     ptr("reply-group"),
			},
			appProps: seen,
			body:     dataBody([]byte(`{"order":7}`)),
			sections: all,
		},
		{
			// Nothing but a body: no properties and no application-properties
			// (the broker adds its header and annotations).
			name:     "a body and nothing else",
			msg:      &amqpactor.Message{Body: []byte("just a body")},
			durable:  true, // RabbitMQ 4.0: no header means durable
			priority: 4,
			body:     dataBody([]byte("just a body")),
			sections: []string{"header", "message-annotations", "data"},
		},
		{
			name:     "group-id alone, the partition key",
			msg:      &amqpactor.Message{Body: []byte("g"), GroupID: "partition-9"},
			durable:  true,
			priority: 4,
			props:    &peerProps{GroupID: ptr("partition-9")},
			body:     dataBody([]byte("g")),
			sections: []string{"header", "message-annotations", "properties", "data"},
		},
		{
			name:     "ulong message-id, uuid correlation-id",
			msg:      &amqpactor.Message{Body: []byte("ids-1"), MessageID: uint64(1) << 63, CorrelationID: uuidValue},
			durable:  true,
			priority: 4,
			props:    &peerProps{MessageID: ptr(tvNum("ulong", uint64(1)<<63)), CorrelationID: ptr(tvUUID(uuidText))},
			body:     dataBody([]byte("ids-1")),
			sections: []string{"header", "message-annotations", "properties", "data"},
		},
		{
			name:     "uuid message-id, binary correlation-id",
			msg:      &amqpactor.Message{Body: []byte("ids-2"), MessageID: uuid2Value, CorrelationID: []byte{1, 2, 3}},
			durable:  true,
			priority: 4,
			props:    &peerProps{MessageID: ptr(tvUUID(uuid2Text)), CorrelationID: ptr(tvBin([]byte{1, 2, 3}))},
			body:     dataBody([]byte("ids-2")),
			sections: []string{"header", "message-annotations", "properties", "data"},
		},
		{
			name:     "binary message-id, string correlation-id",
			msg:      &amqpactor.Message{Body: []byte("ids-3"), MessageID: []byte("bin"), CorrelationID: "corr"},
			durable:  true,
			priority: 4,
			props:    &peerProps{MessageID: ptr(tvBin([]byte("bin"))), CorrelationID: ptr(tvStr("corr"))},
			body:     dataBody([]byte("ids-3")),
			sections: []string{"header", "message-annotations", "properties", "data"},
		},
		{
			// Transient: the header says durable=false, so the message is
			// not durable on any broker.
			name:     "transient, with a ttl",
			msg:      &amqpactor.Message{Body: []byte("transient"), Transient: true, TTL: 10*time.Minute + 500*time.Microsecond},
			durable:  false,
			priority: 4,
			ttl:      ptr(int64(600001)), // rounded up to a whole millisecond
			body:     dataBody([]byte("transient")),
			sections: []string{"header", "message-annotations", "data"},
		},
		{
			name:     "a Value is an amqp-value body",
			msg:      &amqpactor.Message{Value: "text value"},
			durable:  true,
			priority: 4,
			body:     valueBody(tvStr("text value")),
			sections: []string{"header", "message-annotations", "amqp-value"},
		},
		{
			name:     "a []any Value is an amqp-value list, not an amqp-sequence",
			msg:      &amqpactor.Message{Value: []any{int64(1), "two", map[string]any{"k": uint8(3)}}},
			durable:  true,
			priority: 4,
			body:     valueBody(tvList(tvNum("long", 1), tvStr("two"), tvMap(pair{tvStr("k"), tvNum("ubyte", 3)}))),
			sections: []string{"header", "message-annotations", "amqp-value"},
		},
	}
}

// TestAmqpactorToPeer: amqpactor publishes; the peer prints the sections it
// received. The standard fields are in properties, the user's headers and
// nothing else in application-properties, the body one data section, and
// nothing of ours anywhere else: the only annotations are the broker's.
func TestAmqpactorToPeer(t *testing.T) {
	eachPeer(t, func(t *testing.T, e *env) {
		q := e.declare("outbound")
		app := e.app(nil)
		cases := outboundCases(e.user, e.addr(q))
		ctx := testContext(t, 30*time.Second)
		for _, c := range cases {
			if err := app.Publish(ctx, amqpactor.Queue(q), c.msg); err != nil {
				t.Fatalf("%s: publish: %v", c.name, err)
			}
		}
		got := e.peerReceives(t, q, len(cases))
		// One publisher, one queue: the messages arrive in order.
		for i, c := range cases {
			e.checkSeen(t, c.name, q, got[i], c)
		}
	})
}

// checkSeen compares what the peer printed of a message from queue q with
// what it must see.
// peerReceives has the peer receive n messages from queue q and returns them.
func (e *env) peerReceives(t *testing.T, q string, n int) []peerMsg {
	t.Helper()
	var res peerResult
	e.peer.run(t, "receive", e.peerEnv(e.addr(q), "PEER_COUNT", fmt.Sprint(n)), &res)
	if len(res.Messages) != n {
		t.Fatalf("the peer received %d messages, want %d", len(res.Messages), n)
	}
	return res.Messages
}

func (e *env) checkSeen(t *testing.T, name, q string, got peerMsg, want outboundCase) {
	t.Helper()
	p := e.peer
	errorf := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s: %s", name, fmt.Sprintf(format, args...))
	}
	if e.artemis() && len(want.annotations) == 0 {
		// Artemis adds no annotations, so there is no such section.
		want.sections = slices.DeleteFunc(slices.Clone(want.sections), func(s string) bool { return s == "message-annotations" })
	}
	if p.sectionsExact && !slices.Equal(got.Sections, want.sections) {
		errorf("sections %v, want %v", got.Sections, want.sections)
	}
	h := got.Header
	switch {
	case h == nil:
		errorf("no header; want durable=%v priority=%d (the broker writes one)", want.durable, want.priority)
	default:
		if h.Durable == nil || *h.Durable != want.durable {
			errorf("header durable %v, want %v", deref(h.Durable), want.durable)
		}
		if h.Priority == nil || *h.Priority != want.priority {
			errorf("header priority %v, want %d", deref(h.Priority), want.priority)
		}
		if !reflect.DeepEqual(h.TTL, want.ttl) {
			errorf("header ttl %v, want %v", deref(h.TTL), deref(want.ttl))
		}
		if fa := e.firstAcquirer(false); h.FirstAcquirer == nil && fa || h.FirstAcquirer != nil && *h.FirstAcquirer != fa {
			errorf("header first-acquirer %v, want %v", deref(h.FirstAcquirer), fa)
		}
		if h.DeliveryCount != nil && *h.DeliveryCount != 0 {
			errorf("header delivery-count %d, want 0", *h.DeliveryCount)
		}
	}
	if len(got.DeliveryAnnotations) != 0 {
		errorf("delivery-annotations %v, want none", got.DeliveryAnnotations)
	}
	if wantAnn := append(e.brokerAnnotations(q), want.annotations...); !pairsEqual(got.MessageAnnotations, wantAnn) {
		errorf("message-annotations %v, want %v (the broker's and no others)", got.MessageAnnotations, wantAnn)
	}
	if len(got.Footer) != 0 {
		errorf("footer %v, want none", got.Footer)
	}
	for _, d := range diffProps(want.props, got.Properties) {
		errorf("properties: %s", d)
	}
	if len(got.ApplicationProperties) != len(want.appProps) {
		errorf("application-properties has %d entries, want %d: %v", len(got.ApplicationProperties), len(want.appProps), got.ApplicationProperties)
	}
	for k, w := range want.appProps {
		if g, ok := got.ApplicationProperties[k]; !ok {
			errorf("application-properties[%q]: missing, want %v", k, w)
		} else if !w.equal(g) {
			errorf("application-properties[%q]: got %v, want %v", k, g, w)
		}
	}
	for k, g := range got.ApplicationProperties {
		if _, ok := want.appProps[k]; !ok {
			errorf("application-properties[%q]: unexpected %v", k, g)
		}
	}
	if !bodyEqual(want.body, got.Body) {
		errorf("body %s, want %s", jsonText(got.Body), jsonText(want.body))
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// diffProps compares the properties section field by field; nil want means
// every field absent (a peer may print an absent section as null or as
// null fields).
func diffProps(want, got *peerProps) []string {
	if want == nil {
		want = &peerProps{}
	}
	if got == nil {
		got = &peerProps{}
	}
	var out []string
	wv, gv := reflect.ValueOf(want).Elem(), reflect.ValueOf(got).Elem()
	for i := range wv.NumField() {
		name := wv.Type().Field(i).Tag.Get("json")
		w, g := wv.Field(i).Interface(), gv.Field(i).Interface()
		var ok bool
		switch w := w.(type) {
		case *tv:
			g := g.(*tv)
			ok = (w == nil && g == nil) || (w != nil && g != nil && w.equal(*g))
		default:
			ok = reflect.DeepEqual(w, g)
		}
		if !ok {
			out = append(out, fmt.Sprintf("%s: got %s, want %s", name, jsonText(g), jsonText(w)))
		}
	}
	return out
}

func bodyEqual(want, got *peerBody) bool {
	if want == nil || got == nil {
		return want == got
	}
	if want.Kind != got.Kind {
		return false
	}
	switch want.Kind {
	case "data":
		var w, g [][]byte
		return json.Unmarshal(want.V, &w) == nil && json.Unmarshal(got.V, &g) == nil && reflect.DeepEqual(w, g)
	case "value":
		var w, g tv
		return json.Unmarshal(want.V, &w) == nil && json.Unmarshal(got.V, &g) == nil && w.equal(g)
	case "sequence":
		var w, g [][]tv
		if json.Unmarshal(want.V, &w) != nil || json.Unmarshal(got.V, &g) != nil || len(w) != len(g) {
			return false
		}
		for i := range w {
			if !tvList(w[i]...).equal(tvList(g[i]...)) {
				return false
			}
		}
		return true
	}
	return false
}
