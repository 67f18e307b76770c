package inproc

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
)

// viaWire is what the broker used to hand receivers: m encoded and decoded
// by go-amqp, with the broker's header fields.
func viaWire(t *testing.T, m *amqp.Message, first bool, count uint32) *amqp.Message {
	t.Helper()
	data, err := m.MarshalBinary()
	require.NoError(t, err)
	got := new(amqp.Message)
	require.NoError(t, got.UnmarshalBinary(data))
	if got.Header == nil {
		got.Header = &amqp.MessageHeader{Priority: 4}
	}
	got.Header.FirstAcquirer = first
	got.Header.DeliveryCount = count
	return got
}

// TestCopyIsWhatTheWireWouldDeliver: the broker's copy normalises every
// value as go-amqp's codec would, so a receiver sees the same message as
// before the broker stopped encoding.
func TestCopyIsWhatTheWireWouldDeliver(t *testing.T) {
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.FixedZone("x", 3600))
	str, sym, n, u, ttl := "s", "sym", 7, uint(8), 1500*time.Microsecond
	b := []byte("b")
	gseq := uint32(9)
	cases := map[string]*amqp.Message{
		"empty":      {},
		"bench":      benchMessage(),
		"nil data":   {Data: [][]byte{nil, {}, []byte("x")}},
		"no data":    {Data: [][]byte{}},
		"ttl":        {Header: &amqp.MessageHeader{TTL: ttl, Priority: 9, DeliveryCount: 3, FirstAcquirer: true}},
		"no props":   {Properties: &amqp.MessageProperties{}},
		"empty maps": {ApplicationProperties: map[string]any{}, Annotations: amqp.Annotations{}, DeliveryAnnotations: amqp.Annotations{}, Footer: amqp.Annotations{}},
		"properties": {Properties: &amqp.MessageProperties{
			MessageID: uint64(3), UserID: []byte("u"), To: &str, Subject: &str, ReplyTo: &str,
			CorrelationID: []byte(nil), ContentType: &sym, ContentEncoding: &sym,
			AbsoluteExpiryTime: &at, CreationTime: &at, GroupID: &str, GroupSequence: &gseq, ReplyToGroupID: &str,
		}},
		"empty user id": {Properties: &amqp.MessageProperties{UserID: []byte{}, MessageID: amqp.UUID{1}, CorrelationID: "c"}},
		"app properties": {ApplicationProperties: map[string]any{
			"int": 1, "int8": int8(-1), "int16": int16(2), "int32": int32(3), "int64": int64(4),
			"uint": uint(5), "uint8": uint8(6), "uint16": uint16(7), "uint32": uint32(8), "uint64": uint64(9),
			"f32": float32(1.5), "f64": 2.5, "bool": true, "string": "s", "bytes": []byte("x"), "nil bytes": []byte(nil),
			"symbol": amqp.Symbol("y"), "null": amqp.Null{}, "nil": nil, "time": at, "uuid": amqp.UUID{2},
			"*int": &n, "*uint": &u, "*string": &str, "*bytes": &b, "*time": &at,
		}},
		"annotations": {Annotations: amqp.Annotations{
			"k": "v", amqp.Symbol("sym"): int32(1), int64(7): "int key", 8: uint(8),
			"list": []any{1, "a", []byte("b"), []any{}, map[string]any{"x": 1}},
			"map":  map[any]any{"a": 1, amqp.Symbol("b"): 2}, "mixed": map[any]any{"a": 1, int64(2): 2},
			"empty map": map[string]any{}, "symmap": map[amqp.Symbol]any{"s": uint(1)},
			"ints": []int64{1, 2}, "strings": []string{"a"}, "symbols": []amqp.Symbol{"a"},
			"uuids": []amqp.UUID{{3}}, "times": []time.Time{time.Unix(1, 5)}, "nested": amqp.Annotations{"n": 1},
		}},
		"delivery annotations": {DeliveryAnnotations: amqp.Annotations{"x-opt-a": 1}, Footer: amqp.Annotations{"f": []byte("f")}},
		"value":                {Value: map[string]any{"a": []any{1, uint(2)}, "b": at}},
		"value bytes":          {Value: []byte("v")},
		"value null":           {Value: amqp.Null{}},
		"sequence":             {Sequence: [][]any{{1, "a"}, {}, nil}},
		"format and tag":       {Format: 7, DeliveryTag: []byte("t"), Data: [][]byte{[]byte("d")}},
	}
	for name, m := range cases {
		t.Run(name, func(t *testing.T) {
			for _, first := range []bool{true, false} {
				want := viaWire(t, m, first, 4)
				s, err := own(m)
				require.NoError(t, err)
				require.Equal(t, want, s.deliver(first, 4))
			}
		})
	}
}

// TestUnencodableValuesFailThePublish: what go-amqp could not encode is
// refused at publish, naming the section, and nothing is stored.
func TestUnencodableValuesFailThePublish(t *testing.T) {
	var nilString *string
	bad := "\xff"
	self := []any{nil}
	self[0] = self
	cases := map[string]*amqp.Message{
		"value chan":         {Value: make(chan int)},
		"value struct":       {Value: struct{}{}},
		"header struct":      {ApplicationProperties: map[string]any{"h": struct{ A int }{1}}},
		"header func":        {ApplicationProperties: map[string]any{"h": func() {}}},
		"header nil pointer": {ApplicationProperties: map[string]any{"h": nilString}},
		"header bad utf-8":   {ApplicationProperties: map[string]any{"h": bad}},
		"header key utf-8":   {ApplicationProperties: map[string]any{bad: 1}},
		"header **int":       {ApplicationProperties: map[string]any{"h": new(*int)}},
		"annotation value":   {Annotations: amqp.Annotations{"a": []chan int{nil}}},
		"annotation key":     {Annotations: amqp.Annotations{struct{}{}: 1}},
		"list element":       {Value: []any{1, struct{}{}}},
		"self reference":     {Value: self},
		"message-id":         {Properties: &amqp.MessageProperties{MessageID: 1.5i}},
		"subject utf-8":      {Properties: &amqp.MessageProperties{Subject: &bad}},
		"footer":             {Footer: amqp.Annotations{"f": map[string]int{}}},
		"sequence":           {Sequence: [][]any{{struct{}{}}}},
	}
	e := newEnv(t)
	e.b.DeclareQueue("bad")
	s := e.sender(address.Queue("bad"))
	for name, m := range cases {
		t.Run(name, func(t *testing.T) {
			rc, err := s.Send(context.Background(), m, false)
			require.Error(t, err)
			require.Contains(t, err.Error(), "inproc: ")
			require.Nil(t, rc)
			require.Error(t, e.b.Publish(address.Queue("bad"), m))
		})
	}
	require.Equal(t, 0, e.b.QueueDepth("bad"))
}

// mutateAll changes, in place, everything of m a holder could reach.
func mutateAll(m *amqp.Message) {
	m.Data[0][0] = 'X'
	m.ApplicationProperties["h"] = "changed"
	m.ApplicationProperties["b"].([]byte)[0] = 'X'
	m.Annotations["a"] = "changed"
	m.Annotations["l"].([]any)[0] = "changed"
	m.Properties.UserID[0] = 'X'
	*m.Properties.Subject = "changed"
	*m.Properties.CreationTime = time.Time{}
	*m.Properties.GroupSequence = 99
	m.Properties.MessageID.([]byte)[0] = 'X'
	m.Header.Durable = false
}

func richMessage() *amqp.Message {
	created := time.UnixMilli(1_700_000_000_000)
	return &amqp.Message{
		Header:                &amqp.MessageHeader{Durable: true, Priority: 4},
		Annotations:           amqp.Annotations{"a": "v", "l": []any{"e"}},
		Properties:            &amqp.MessageProperties{MessageID: []byte("id"), UserID: []byte("u"), Subject: ptr("s"), CreationTime: &created, GroupSequence: ptr(uint32(1))},
		ApplicationProperties: map[string]any{"h": int64(1), "b": []byte("b")},
		Data:                  [][]byte{[]byte("body")},
	}
}

func requireRich(t *testing.T, m *amqp.Message) {
	t.Helper()
	want := viaWire(t, richMessage(), m.Header.FirstAcquirer, m.Header.DeliveryCount)
	require.Equal(t, want, m)
}

// TestDeliveriesShareNothing: a receiver that changes its message in place
// changes neither a redelivery of it, nor another subscription's copy, nor a
// dead letter; nor does a publisher that reuses its message after Send.
func TestDeliveriesShareNothing(t *testing.T) {
	e := newEnv(t)
	topic, queue := address.Topic("share"), address.Queue("share-q")
	t1, t2 := e.sub(topic, 1), e.sub(topic, 1)
	q := e.sub(queue, 2)
	for _, a := range []address.Address{topic, queue} {
		m := richMessage()
		_, err := e.sender(a).Send(context.Background(), m, false)
		require.NoError(t, err)
		mutateAll(m)
	}

	got := recv(t, t1)
	requireRich(t, got)
	mutateAll(got)
	requireRich(t, recv(t, t2))

	got = recv(t, q)
	requireRich(t, got)
	mutateAll(got)
	settle(t, q, got, release)
	again := recv(t, q)
	requireRich(t, again)
	require.False(t, again.Header.FirstAcquirer)
	mutateAll(again)
	settle(t, q, again, rejected)

	dead := e.b.DeadLetters("share-q")
	require.Len(t, dead, 1)
	mutateAll(dead[0])
	dead = e.b.DeadLetters("share-q")
	delete(dead[0].Annotations, "x-opt-inproc-condition")
	delete(dead[0].Annotations, "x-opt-inproc-description")
	requireRich(t, dead[0])
}

// TestShallowMapsAreStillOwnCopies: a message whose values are all immutable
// takes the shallow path, and its maps are still each delivery's own.
func TestShallowMapsAreStillOwnCopies(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("shallow")
	r := e.sub(a, 2)
	m := &amqp.Message{
		ApplicationProperties: map[string]any{"h": "v"},
		Annotations:           amqp.Annotations{"a": int64(1)},
		Data:                  [][]byte{[]byte("body")},
	}
	_, err := e.sender(a).Send(context.Background(), m, false)
	require.NoError(t, err)
	m.ApplicationProperties["h"] = "publisher"
	got := recv(t, r)
	got.ApplicationProperties["h"] = "receiver"
	got.Annotations["a"] = "receiver"
	got.Data[0][0] = 'X'
	settle(t, r, got, release)
	again := recv(t, r)
	require.Equal(t, "v", again.ApplicationProperties["h"])
	require.Equal(t, int64(1), again.Annotations["a"])
	require.Equal(t, "body", string(again.GetData()))
}
