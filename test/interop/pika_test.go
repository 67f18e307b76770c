package interop

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/amqpactor/amqpactor"
)

// pikaPeer is an AMQP 0-9-1 client that we did not write (Debian's
// python3-pika), the independent peer of Dial091. It is not in peers: it
// speaks another protocol, so the AMQP 1.0 tests do not run it.
// pika_peer.py describes its modes and the JSON it reads and prints.
var pikaPeer = peer{
	name:  "pika",
	probe: []string{"/usr/bin/python3", "-c", "import pika"},
	cmd:   []string{"/usr/bin/python3", "pika_peer.py"},
}

// pikaMsg is a message as pika_peer.py sends and prints it: the basic
// properties by pika's names, and the headers tagged with the Python type
// pika reads them as.
type pikaMsg struct {
	Body        []byte          `json:"body"` // base64 in JSON
	Redelivered bool            `json:"redelivered,omitempty"`
	Properties  map[string]any  `json:"properties,omitempty"`
	Headers     map[string]ptag `json:"headers,omitempty"`
}

// ptag is a header value tagged with its Python type; V is kept raw so that
// lists and tables compare whole.
type ptag struct {
	T string          `json:"t"`
	V json.RawMessage `json:"v,omitempty"`
}

func ptagOf(t string, v any) ptag { return ptag{T: t, V: raw(v)} }
func pNull() ptag                 { return ptag{T: "null"} }
func pInt(n int64) ptag           { return ptagOf("int", fmt.Sprint(n)) }

func (p ptag) String() string { b, _ := json.Marshal(p); return string(b) }

// equal compares two tagged values as JSON, so that the order of a table's
// names and the spelling of the raw JSON do not matter.
func (p ptag) equal(q ptag) bool {
	if p.T != q.T {
		return false
	}
	var a, b any
	if len(p.V) > 0 && json.Unmarshal(p.V, &a) != nil {
		return false
	}
	if len(q.V) > 0 && json.Unmarshal(q.V, &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

type pikaResult struct {
	Peer     string    `json:"peer"`
	Sent     int       `json:"sent"`
	Messages []pikaMsg `json:"messages"`
}

// app091 is env.app on Dial091: an App that speaks AMQP 0-9-1 to the same
// broker, stopped when the test ends.
func (e *env) app091(setup func(app *amqpactor.App)) *amqpactor.App {
	e.t.Helper()
	app := amqpactor.New(amqpactor.Dial091(e.url, amqpactor.WithContainerID("interop-amqpactor-091")),
		amqpactor.WithName("interop-091"))
	return e.started(app, setup, "start the App on Dial091")
}

// pikaCase is a Message the App publishes on Dial091 and what pika must
// read of it.
type pikaCase struct {
	name    string
	msg     *amqpactor.Message
	props   map[string]any // JSON values, as pika_peer.py prints them
	headers map[string]ptag
	// quirks: what pika 1.2 (Debian 12's) reads instead of a header of
	// headers; a later pika that reads it right passes too.
	quirks map[string]ptag
}

func pikaOutboundCases(user string) []pikaCase {
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	return []pikaCase{
		{
			name: "every field the 0-9-1 mapping carries",
			msg: &amqpactor.Message{
				Body:               []byte(`{"order":7}`),
				MessageID:          "amqpactor-091-full",
				CorrelationID:      "corr-7",
				ContentType:        "application/json",
				ContentEncoding:    "deflate",
				ReplyTo:            "replies.091",
				Subject:            "ördered",
				To:                 "/queues/somewhere",
				GroupID:            "customer-7",
				ReplyToGroupID:     "reply-group",
				UserID:             []byte(user),
				CreationTime:       creationTime,
				AbsoluteExpiryTime: expiryTime,
				GroupSequence:      3,
				Headers: map[string]any{
					"string":  "héllo ✓",
					"bool":    true,
					"int64":   int64(math.MinInt64),
					"int32":   int32(math.MinInt32),
					"uint32":  uint32(math.MaxUint32), // an int64 in the table
					"float64": 2.5,
					"bytes":   []byte{0, 0xff},
					"time":    headerTime, // to the second
					"nil":     nil,
					// No map or list: Message.Headers holds none (AMQP
					// 1.0's application-properties cannot).
				},
				Durable:  true,
				Priority: 9,
				TTL:      90 * time.Second,
			},
			props: map[string]any{
				"message_id":       "amqpactor-091-full",
				"correlation_id":   "corr-7",
				"content_type":     "application/json",
				"content_encoding": "deflate",
				"reply_to":         "replies.091",
				"type":             "ördered",
				"user_id":          user,
				"app_id":           "customer-7",
				"timestamp":        creationTime.Unix(),
				"expiration":       "90000",
				"priority":         9,
				"delivery_mode":    2,
			},
			headers: map[string]ptag{
				"string":  ptagOf("str", "héllo ✓"),
				"bool":    ptagOf("bool", true),
				"int64":   pInt(math.MinInt64),
				"int32":   pInt(math.MinInt32),
				"uint32":  pInt(math.MaxUint32),
				"float64": ptagOf("float", "2.5"),
				"bytes":   ptagOf("bytes", b64([]byte{0, 0xff})),
				"time":    ptagOf("datetime", fmt.Sprint(headerTime.Unix())),
				"nil":     pNull(),
				// The AMQP 1.0 fields 0-9-1 has no property for.
				"x-amqp-1.0-creation-time":        pInt(creationTime.UnixMilli()),
				"x-amqp-1.0-absolute-expiry-time": pInt(expiryTime.UnixMilli()),
				"x-amqp-1.0-to":                   ptagOf("str", "/queues/somewhere"),
				"x-amqp-1.0-reply-to-group-id":    ptagOf("str", "reply-group"),
				"x-amqp-1.0-group-sequence":       pInt(3),
			},
			quirks: map[string]ptag{
				// pika 1.2 reads a double as its integer part and a
				// long-long ('l', signed as RabbitMQ and amqp091-go have it)
				// as unsigned: the bits arrive, pika misreads them.
				"float64": pInt(2),
				"int64":   ptagOf("int", "9223372036854775808"),
			},
		},
		{
			// Durable unless asked otherwise (issue 28): delivery-mode 2 and
			// AMQP 1.0's default priority; no other property and no headers.
			name:  "a body and nothing else",
			msg:   &amqpactor.Message{Body: []byte("just a body")},
			props: map[string]any{"priority": 4, "delivery_mode": 2},
		},
		{
			name:  "transient",
			msg:   &amqpactor.Message{Body: []byte("transient"), Transient: true},
			props: map[string]any{"priority": 4, "delivery_mode": 1},
		},
		{
			name: "ulong message-id, uuid correlation-id, in text with their types",
			msg:  &amqpactor.Message{Body: []byte("ids"), MessageID: uint64(1) << 63, CorrelationID: uuidValue},
			props: map[string]any{
				"message_id":     fmt.Sprint(uint64(1) << 63),
				"correlation_id": uuidText,
				"priority":       4,
				"delivery_mode":  2,
			},
			headers: map[string]ptag{
				"x-amqp-1.0-message-id-type":     ptagOf("str", "ulong"),
				"x-amqp-1.0-correlation-id-type": ptagOf("str", "uuid"),
			},
		},
	}
}

// TestDial091ToPika: an App on Dial091 publishes; pika reads every basic
// property and header, each as the package documentation of amqp091 maps
// it, and nothing else.
func TestDial091ToPika(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pikaPeer)
	q := e.queue("outbound091")
	app := e.app091(nil)
	cases := pikaOutboundCases(e.user)
	ctx := testContext(t, 30*time.Second)
	for _, c := range cases {
		if err := app.Publish(ctx, amqpactor.Queue(q), c.msg); err != nil {
			t.Fatalf("%s: publish: %v", c.name, err)
		}
	}
	var res pikaResult
	pikaPeer.run(t, "receive", e.peerEnv(q, "PEER_COUNT", fmt.Sprint(len(cases))), &res)
	if len(res.Messages) != len(cases) {
		t.Fatalf("pika received %d messages, want %d", len(res.Messages), len(cases))
	}
	// One publisher, one queue: the messages arrive in order.
	for i, c := range cases {
		got := res.Messages[i]
		if string(got.Body) != string(c.msg.Body) {
			t.Errorf("%s: body %q, want %q", c.name, got.Body, c.msg.Body)
		}
		if got.Redelivered {
			t.Errorf("%s: redelivered on its first delivery", c.name)
		}
		for _, d := range diffJSONMaps(c.props, got.Properties) {
			t.Errorf("%s: property %s", c.name, d)
		}
		for _, d := range diffPtags(c.headers, withQuirks(c.headers, got.Headers, c.quirks)) {
			t.Errorf("%s: header %s", c.name, d)
		}
	}
}

// diffJSONMaps lists the names whose values differ once both sides are
// JSON (so 9 and 9.0 are equal, as they are on the wire).
func diffJSONMaps(want, got map[string]any) []string {
	norm := func(m map[string]any) map[string]any {
		out := map[string]any{}
		b, _ := json.Marshal(m)
		_ = json.Unmarshal(b, &out)
		return out
	}
	w, g := norm(want), norm(got)
	var out []string
	for _, k := range keys(w, g) {
		wv, wok := w[k]
		gv, gok := g[k]
		switch {
		case !gok:
			out = append(out, fmt.Sprintf("%s: missing, want %s", k, jsonText(wv)))
		case !wok:
			out = append(out, fmt.Sprintf("%s: unexpected %s", k, jsonText(gv)))
		case !reflect.DeepEqual(wv, gv):
			out = append(out, fmt.Sprintf("%s: got %s, want %s", k, jsonText(gv), jsonText(wv)))
		}
	}
	return out
}

func diffPtags(want, got map[string]ptag) []string {
	var out []string
	for _, k := range keys(want, got) {
		wv, wok := want[k]
		gv, gok := got[k]
		switch {
		case !gok:
			out = append(out, fmt.Sprintf("%s: missing, want %s", k, wv))
		case !wok:
			out = append(out, fmt.Sprintf("%s: unexpected %s", k, gv))
		case !wv.equal(gv):
			out = append(out, fmt.Sprintf("%s: got %s, want %s", k, gv, wv))
		}
	}
	return out
}

// withQuirks returns got with each header that pika read as its known
// quirk replaced by what was sent, so that the comparison passes on it.
func withQuirks(want, got, quirks map[string]ptag) map[string]ptag {
	out := make(map[string]ptag, len(got))
	for k, v := range got {
		if q, ok := quirks[k]; ok && q.equal(v) {
			v = want[k]
		}
		out[k] = v
	}
	return out
}

// keys is the sorted union of the names of two maps.
func keys[V any](a, b map[string]V) []string {
	seen := map[string]bool{}
	for k := range a {
		seen[k] = true
	}
	for k := range b {
		seen[k] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestPikaToDial091: pika publishes messages with every basic property and
// headers of every type it can send; an App on Dial091 receives them, and
// Message shows each field as the package documentation of amqp091 maps
// it.
func TestPikaToDial091(t *testing.T) {
	t.Parallel()
	e := newEnv(t, pikaPeer)
	q := e.queue("inbound091")
	h, wait := collect(t)
	e.app091(func(app *amqpactor.App) {
		if _, err := app.Subscribe(amqpactor.Queue(q), h); err != nil {
			t.Fatalf("subscribe: %v", err)
		}
	})

	const stamp = 1700000000 // 0-9-1 timestamps are whole seconds
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	sent := []pikaMsg{
		{
			Body: []byte("from pika"),
			Properties: map[string]any{
				"message_id":       "pika-full",
				"correlation_id":   "pika-corr",
				"content_type":     "text/plain",
				"content_encoding": "gzip",
				"reply_to":         "pika.replies",
				"expiration":       "60000",
				"priority":         7,
				"delivery_mode":    2,
				"timestamp":        stamp,
				"type":             "pika.type",
				"user_id":          e.user,
				"app_id":           "pika-group",
			},
			Headers: map[string]ptag{
				"str":      ptagOf("str", "héllo ✓"),
				"int":      pInt(42),
				"long":     pInt(1 << 40),
				"bool":     ptagOf("bool", true),
				"bytes":    ptagOf("bytes", b64("\x00\xff")),
				"decimal":  ptagOf("decimal", "1.25"),
				"datetime": ptagOf("datetime", "1234567890"),
				"null":     pNull(),
				"table":    ptagOf("table", map[string]ptag{"k": ptagOf("str", "v")}),
				"list":     ptagOf("list", []ptag{pInt(1), ptagOf("str", "two")}),
				"x-trace":  ptagOf("str", "t-1"), // "x-": an annotation
			},
		},
		{
			Body:       []byte("minimal"),
			Properties: map[string]any{"message_id": "pika-min"},
		},
	}
	want := map[string]*amqpactor.Message{
		"pika-full": {
			Body:            []byte("from pika"),
			MessageID:       "pika-full",
			CorrelationID:   "pika-corr",
			ContentType:     "text/plain",
			ContentEncoding: "gzip",
			ReplyTo:         "pika.replies",
			Subject:         "pika.type",
			UserID:          []byte(e.user),
			GroupID:         "pika-group",
			CreationTime:    time.Unix(stamp, 0).UTC(),
			TTL:             time.Minute,
			Priority:        7,
			Durable:         true,
			FirstAcquirer:   true,
			Headers: map[string]any{
				"str":      "héllo ✓",
				"int":      int32(42),
				"long":     int64(1 << 40),
				"bool":     true,
				"bytes":    []byte{0, 0xff},
				"decimal":  rmq.Decimal{Scale: 2, Value: 125},
				"datetime": time.Unix(1234567890, 0).UTC(),
				"null":     nil,
				"table":    map[string]any{"k": "v"},
				"list":     []any{int32(1), "two"},
			},
			Annotations: map[string]any{"x-trace": "t-1"},
		},
		// No delivery-mode: not durable; no priority: AMQP 1.0's default.
		"pika-min": {Body: []byte("minimal"), MessageID: "pika-min", Priority: 4, FirstAcquirer: true, Transient: true},
	}

	var res pikaResult
	b, err := json.Marshal(sent)
	if err != nil {
		t.Fatal(err)
	}
	pikaPeer.run(t, "send", e.peerEnv(q, "PEER_MESSAGES", string(b)), &res)
	if res.Sent != len(sent) {
		t.Fatalf("pika sent %d messages, want %d", res.Sent, len(sent))
	}
	for _, m := range wait(testContext(t, 30*time.Second), len(sent)) {
		id, _ := m.MessageID.(string)
		w := want[id]
		if w == nil {
			t.Errorf("unexpected message %s", show(m.MessageID))
			continue
		}
		delete(want, id)
		for _, d := range diffMessage(w, m) {
			t.Errorf("%s: %s", id, d)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing messages: %s", strings.Join(keys(want, nil), ", "))
	}
}
