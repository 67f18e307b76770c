package conformance

import (
	"context"
	"sync"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// testMessageRoundTrip: every field of a Message survives publish -> broker
// -> handler, up to the normalisations documented in internal/protocol/convert.go.
func testMessageRoundTrip(e *env) {
	q := e.queue("roundtrip")
	var mu sync.Mutex
	got := map[string]*amqpactor.Message{}
	app := e.startedApp()
	e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		mu.Lock()
		got[m.Subject] = m
		mu.Unlock()
		return nil
	})

	userID := e.f.Features.UserID
	if userID == nil {
		userID = []byte("conformance-user")
	}
	// A time with sub-millisecond digits and a zone other than UTC.
	now := time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.FixedZone("X", 3*3600))
	uuid := amqp.UUID{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	headers := map[string]any{
		"bool":    true,
		"int8":    int8(-8),
		"int16":   int16(-1600),
		"int32":   int32(-320000),
		"int64":   int64(-6400000000),
		"int":     -42,
		"uint8":   uint8(200),
		"uint16":  uint16(65000),
		"uint32":  uint32(4000000000),
		"uint64":  uint64(1) << 63,
		"uint":    uint(7),
		"float32": float32(1.5),
		"float64": 2.25,
		"string":  "naïve ✓",
		"empty":   "",
		"binary":  []byte{0, 1, 2, 255},
		"symbol":  amqp.Symbol("sym"),
		"uuid":    uuid,
		"time":    now,
		"null":    nil,
	}
	full := &amqpactor.Message{
		Body:               []byte("payload\x00\x01\xff"),
		MessageID:          "mid-1",
		CorrelationID:      "cid-1",
		ContentType:        "application/octet-stream",
		ContentEncoding:    "x-conformance",
		ReplyTo:            "reply-here",
		Subject:            "full",
		To:                 "somewhere",
		GroupID:            "group-1",
		ReplyToGroupID:     "reply-group-1",
		UserID:             userID,
		CreationTime:       now,
		AbsoluteExpiryTime: now.Add(100 * 365 * 24 * time.Hour), // far from expiring
		GroupSequence:      7,
		Headers:            headers,
		Durable:            true,
		Priority:           7,
		TTL:                90*time.Minute + 300*time.Microsecond,
		Annotations: map[string]any{
			"x-opt-conformance-string": "a",
			"x-opt-conformance-long":   int64(5),
			"x-opt-conformance-list":   []any{"x", int64(1)},
		},
	}
	minimal := &amqpactor.Message{Subject: "minimal", MessageID: uint64(42), CorrelationID: uuid}
	binIDs := &amqpactor.Message{Subject: "binary-ids", MessageID: []byte{1, 2, 3}, CorrelationID: uint64(7), Body: []byte("b")}
	uuidIDs := &amqpactor.Message{Subject: "uuid-ids", MessageID: uuid, CorrelationID: []byte{9}, Body: []byte("u")}
	value := &amqpactor.Message{Subject: "value", MessageID: "v", Value: "an amqp-value body"}
	priority := &amqpactor.Message{Subject: "priority-4", MessageID: "p", Priority: 4, Body: []byte("p")}
	transient := &amqpactor.Message{Subject: "transient", MessageID: "t", Transient: true, Body: []byte("t")}

	all := []*amqpactor.Message{full, minimal, binIDs, uuidIDs, value, priority, transient}
	if e.f.Features.AMQP091 {
		// What a 0-9-1 message cannot carry is refused at publish, naming
		// what: never sent changed.
		err := app.Publish(e.ctx, q, value)
		require.ErrorContains(e, err, "value body", "an amqp-value body over AMQP 0-9-1")
		err = app.Publish(e.ctx, q, &amqpactor.Message{Subject: "big", Headers: map[string]any{"uint64": uint64(1) << 63}})
		require.ErrorContains(e, err, "uint64", "a uint64 header beyond int64 over AMQP 0-9-1")
		delete(headers, "uint64")
		all = []*amqpactor.Message{full, minimal, binIDs, uuidIDs, priority, transient}
	}
	for _, m := range all {
		e.publish(app, q, m)
	}
	e.eventually(func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == len(all) }, "every message")
	mu.Lock()
	defer mu.Unlock()

	// Every message is a first delivery.
	for s, m := range got {
		require.Zero(e, m.DeliveryCount, "%s: delivery-count", s)
		e.firstAcquirer(m, true, "%s", s)
	}

	g := got["full"]
	require.Equal(e, full.Body, g.Body)
	require.Nil(e, g.Value)
	require.Equal(e, full.MessageID, g.MessageID)
	require.Equal(e, full.CorrelationID, g.CorrelationID)
	require.Equal(e, full.ContentType, g.ContentType)
	require.Equal(e, full.ContentEncoding, g.ContentEncoding)
	require.Equal(e, full.ReplyTo, g.ReplyTo)
	require.Equal(e, full.Subject, g.Subject)
	require.Equal(e, full.To, g.To)
	require.Equal(e, full.GroupID, g.GroupID)
	require.Equal(e, full.ReplyToGroupID, g.ReplyToGroupID)
	require.Equal(e, full.UserID, g.UserID)
	// Times: truncated to the millisecond, in UTC.
	requireTime(e, "CreationTime", full.CreationTime, g.CreationTime)
	require.Equal(e, time.UTC, g.CreationTime.Location(), "CreationTime comes back in UTC")
	requireTime(e, "AbsoluteExpiryTime", full.AbsoluteExpiryTime, g.AbsoluteExpiryTime)
	require.Equal(e, full.GroupSequence, g.GroupSequence)
	require.True(e, g.Durable, "Durable")
	require.EqualValues(e, 7, g.Priority, "Priority")
	require.Equal(e, 90*time.Minute+time.Millisecond, g.TTL, "TTL is rounded up to the millisecond")

	// Headers: every AMQP primitive, as go-amqp decodes it.
	wantHeaders := map[string]any{}
	for k, v := range headers {
		wantHeaders[k] = v
	}
	wantHeaders["int"] = int64(-42)
	wantHeaders["uint"] = uint64(7)
	wantHeaders["symbol"] = "sym"
	delete(wantHeaders, "time")
	gotTime, ok := g.Headers["time"].(time.Time)
	require.True(e, ok, "header time: got %T", g.Headers["time"])
	if e.f.Features.AMQP091 {
		// A 0-9-1 field table has signed 64-bit integers, no UUIDs, and
		// timestamps in seconds.
		wantHeaders["uint"] = int64(7)
		wantHeaders["uuid"] = uuid.String()
		require.True(e, now.Truncate(time.Second).Equal(gotTime), "header time: sent %v, got %v (to the second)", now, gotTime)
	} else {
		requireTime(e, "header time", now, gotTime)
	}
	gotHeaders := map[string]any{}
	for k, v := range g.Headers {
		if k != "time" {
			gotHeaders[k] = v
		}
	}
	require.Equal(e, wantHeaders, gotHeaders, "application-properties")
	_, hasNull := g.Headers["null"]
	require.True(e, hasNull, "a null header is kept")

	// Annotations: ours arrive; a broker may add its own.
	for k, v := range full.Annotations {
		require.Contains(e, g.Annotations, k, "annotation %s", k)
		require.Equal(e, v, g.Annotations[k], "annotation %s", k)
	}

	m := got["minimal"]
	require.Equal(e, uint64(42), m.MessageID)
	require.Equal(e, uuid, m.CorrelationID)
	require.NotNil(e, m.Body, "a nil Body reads back as an empty one")
	require.Empty(e, m.Body)
	require.EqualValues(e, 4, m.Priority, "an unset priority reads back as the default 4")
	// Durable unless asked otherwise, whatever the broker does with a
	// message that has no header (RabbitMQ 4.2+ keeps it transient).
	require.True(e, m.Durable, "an unset Durable reads back durable")
	require.False(e, m.Transient, "an unset Durable reads back durable")
	tr := got["transient"]
	require.False(e, tr.Durable, "a Transient message reads back transient")
	require.True(e, tr.Transient, "a Transient message reads back transient")
	require.Zero(e, m.TTL)
	require.Empty(e, m.Headers)
	require.True(e, m.CreationTime.IsZero())
	require.Nil(e, m.UserID)

	b := got["binary-ids"]
	require.Equal(e, []byte{1, 2, 3}, b.MessageID)
	require.Equal(e, uint64(7), b.CorrelationID)

	u := got["uuid-ids"]
	require.Equal(e, uuid, u.MessageID)
	require.Equal(e, []byte{9}, u.CorrelationID)

	if !e.f.Features.AMQP091 {
		v := got["value"]
		require.Equal(e, "an amqp-value body", v.Value)
		require.Empty(e, v.Body)
	}

	require.EqualValues(e, 4, got["priority-4"].Priority)
}

func requireTime(e *env, what string, sent, got time.Time) {
	e.Helper()
	want := sent.Truncate(time.Millisecond)
	require.True(e, want.Equal(got), "%s: sent %v, want %v, got %v", what, sent, want, got)
}
