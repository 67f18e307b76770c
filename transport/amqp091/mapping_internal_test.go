package amqp091

import (
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	rmq "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
)

// TestMappingRoundTrip: every field of the mapping table comes back as it
// was sent through toPublishing and fromDelivery (without a broker).
func TestMappingRoundTrip(t *testing.T) {
	now := time.Date(2025, 3, 14, 15, 9, 26, 535000000, time.UTC)
	later := now.Add(time.Hour)
	gs := uint32(7)
	uuid := amqp.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	str := func(s string) *string { return &s }
	in := &amqp.Message{
		Data: [][]byte{[]byte("pay"), []byte("load")},
		Properties: &amqp.MessageProperties{
			MessageID: uint64(42), CorrelationID: uuid,
			ContentType: str("text/plain"), ContentEncoding: str("gzip"), ReplyTo: str("/queues/r"),
			Subject: str("subj"), To: str("/queues/to"), GroupID: str("g"), ReplyToGroupID: str("rg"),
			UserID: []byte("guest"), CreationTime: &now, AbsoluteExpiryTime: &later, GroupSequence: &gs,
		},
		Header:                &amqp.MessageHeader{Durable: true, Priority: 7, TTL: 90 * time.Second, DeliveryCount: 2},
		ApplicationProperties: map[string]any{"s": "v", "n": int64(-3), "u16": uint16(9), "sym": amqp.Symbol("x"), "nested": map[string]any{"k": int32(1)}},
		Annotations:           amqp.Annotations{"x-opt-a": "b", "not-x": "dropped"},
	}
	p, err := toPublishing(in)
	require.NoError(t, err)
	require.Equal(t, "payload", string(p.Body))
	require.Equal(t, "g", p.AppId, "group-id goes as app-id, as RabbitMQ 4 converts it")
	require.Equal(t, "subj", p.Type)
	require.Equal(t, "90000", p.Expiration)
	require.EqualValues(t, rmq.Persistent, p.DeliveryMode)

	d := &rmq.Delivery{Headers: p.Headers, ContentType: p.ContentType, ContentEncoding: p.ContentEncoding,
		DeliveryMode: p.DeliveryMode, Priority: p.Priority, CorrelationId: p.CorrelationId, ReplyTo: p.ReplyTo,
		Expiration: p.Expiration, MessageId: p.MessageId, Timestamp: p.Timestamp, Type: p.Type, UserId: p.UserId,
		AppId: p.AppId, Body: p.Body, Redelivered: true}
	out := fromDelivery(d, true)
	require.Equal(t, [][]byte{[]byte("payload")}, out.Data)
	require.Equal(t, uint64(42), out.Properties.MessageID)
	require.Equal(t, uuid, out.Properties.CorrelationID)
	for _, f := range []struct{ got, want *string }{
		{out.Properties.ContentType, in.Properties.ContentType}, {out.Properties.ContentEncoding, in.Properties.ContentEncoding},
		{out.Properties.ReplyTo, in.Properties.ReplyTo}, {out.Properties.Subject, in.Properties.Subject},
		{out.Properties.To, in.Properties.To}, {out.Properties.GroupID, in.Properties.GroupID},
		{out.Properties.ReplyToGroupID, in.Properties.ReplyToGroupID},
	} {
		require.NotNil(t, f.got, "want %q", *f.want)
		require.Equal(t, *f.want, *f.got)
	}
	require.Equal(t, []byte("guest"), out.Properties.UserID)
	require.True(t, now.Equal(*out.Properties.CreationTime), "creation-time to the millisecond")
	require.True(t, later.Equal(*out.Properties.AbsoluteExpiryTime))
	require.Equal(t, gs, *out.Properties.GroupSequence)
	require.Equal(t, amqp.MessageHeader{Durable: true, Priority: 7, TTL: 90 * time.Second, DeliveryCount: 2, FirstAcquirer: false}, *out.Header)
	require.Equal(t, map[string]any{"s": "v", "n": int64(-3), "u16": uint16(9), "sym": "x", "nested": map[string]any{"k": int32(1)}},
		out.ApplicationProperties)
	require.Equal(t, amqp.Annotations{"x-opt-a": "b"}, out.Annotations, "x- annotations only")
}

// TestMappingDefaults: a bare message reads back with AMQP 1.0's defaults
// and nothing extra.
func TestMappingDefaults(t *testing.T) {
	p, err := toPublishing(&amqp.Message{})
	require.NoError(t, err)
	require.Nil(t, p.Headers)
	out := fromDelivery(&rmq.Delivery{Priority: p.Priority, DeliveryMode: p.DeliveryMode}, false)
	require.EqualValues(t, 4, out.Header.Priority)
	require.Equal(t, rmq.Persistent, p.DeliveryMode, "a bare message is persistent (issue 28)")
	require.True(t, out.Header.Durable)
	require.True(t, out.Header.FirstAcquirer)
	require.Zero(t, out.Header.TTL)
	require.Nil(t, out.Properties.MessageID)
	require.Nil(t, out.ApplicationProperties)
}

// TestMappingTransient: only a header that says durable=false makes a
// transient 0-9-1 message.
func TestMappingTransient(t *testing.T) {
	p, err := toPublishing(&amqp.Message{Header: &amqp.MessageHeader{Priority: 4}})
	require.NoError(t, err)
	require.Equal(t, rmq.Transient, p.DeliveryMode)
	p, err = toPublishing(&amqp.Message{Header: &amqp.MessageHeader{Durable: true, Priority: 4}})
	require.NoError(t, err)
	require.Equal(t, rmq.Persistent, p.DeliveryMode)
}

// TestCheckMessage: what 0-9-1 cannot carry is refused, naming it.
func TestCheckMessage(t *testing.T) {
	c := &connector{}
	require.NoError(t, c.CheckMessage(&amqp.Message{Data: [][]byte{nil}}))
	require.ErrorIs(t, c.CheckMessage(&amqp.Message{Value: "v"}), errValueBody)
	require.ErrorContains(t, c.CheckMessage(&amqp.Message{ApplicationProperties: map[string]any{"big": uint64(1) << 63}}), `"big"`)
	require.ErrorContains(t, c.CheckMessage(&amqp.Message{ApplicationProperties: map[string]any{"ch": struct{}{}}}), `"ch"`)
	require.ErrorContains(t, c.CheckMessage(&amqp.Message{Properties: &amqp.MessageProperties{MessageID: 1.5}}), "message-id")
	require.Error(t, c.CheckMessage(nil))
}

// TestRoutes: how each kind of address is published.
func TestRoutes(t *testing.T) {
	for raw, want := range map[string]route{
		"ex/key":                       {exchange: "ex", key: "key", passive: true},
		"ex/a/b":                       {exchange: "ex", key: "a/b", passive: true},
		"some-queue":                   {key: "some-queue"},
		"/queues/a%2Fb":                {key: "a/b"},
		"/exchanges/x/k":               {exchange: "x", key: "k", passive: true},
		"amq.rabbitmq.reply-to.g1h/AB": {key: "amq.rabbitmq.reply-to.g1h/AB"},
	} {
		require.Equal(t, want, rawRoute(raw), raw)
	}
}

// TestTopicRoutesBySubject: a topic is published with each message's
// subject as the routing key, which 0-9-1 bounds at 255 bytes; a queue's
// route never changes with the subject.
func TestTopicRoutesBySubject(t *testing.T) {
	subject := func(s string) *amqp.Message {
		return &amqp.Message{Properties: &amqp.MessageProperties{Subject: &s}}
	}
	topic, err := sendRoute(address.Topic("events"))
	require.NoError(t, err)
	r, err := topic.forMessage(subject("orders.new.eu"))
	require.NoError(t, err)
	require.Equal(t, "events", r.exchange)
	require.Equal(t, "orders.new.eu", r.key)
	r, err = topic.forMessage(&amqp.Message{})
	require.NoError(t, err)
	require.Equal(t, "", r.key, "no subject: the empty routing key")
	_, err = topic.forMessage(subject(strings.Repeat("k", 256)))
	require.ErrorContains(t, err, "255")

	queue, err := sendRoute(address.Queue("orders"))
	require.NoError(t, err)
	r, err = queue.forMessage(subject("orders.new.eu"))
	require.NoError(t, err)
	require.Equal(t, "orders", r.key)
}

// TestDeliveryCountIsTheBrokers: x-delivery-count is the delivery-count
// only on a redelivery from a quorum queue, where RabbitMQ sets it; a
// publisher's header counts for nothing on a first delivery or on a
// classic queue.
func TestDeliveryCountIsTheBrokers(t *testing.T) {
	spoofed := rmq.Table{headerDeliveryCount: int64(1000)}
	for _, c := range []struct {
		quorum, redelivered bool
		want                uint32
	}{{true, true, 1000}, {true, false, 0}, {false, true, 0}, {false, false, 0}} {
		m := fromDelivery(&rmq.Delivery{Headers: spoofed, Redelivered: c.redelivered}, c.quorum)
		require.Equal(t, c.want, m.Header.DeliveryCount, "quorum %v, redelivered %v", c.quorum, c.redelivered)
		require.NotContains(t, m.Annotations, headerDeliveryCount, "the header is not handed on")
	}
}
