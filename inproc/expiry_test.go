package inproc

import (
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
)

func withTTL(body string, ttl time.Duration) *amqp.Message {
	m := amqp.NewMessage([]byte(body))
	m.Header = &amqp.MessageHeader{TTL: ttl}
	return m
}

func expiringAt(body string, at time.Time) *amqp.Message {
	m := amqp.NewMessage([]byte(body))
	m.Properties = &amqp.MessageProperties{AbsoluteExpiryTime: &at}
	return m
}

// past waits until the clock has passed t: expiry is about the clock, so
// this is the condition itself, not a synchronisation.
func past(t *testing.T, at time.Time) {
	t.Helper()
	require.Eventually(t, func() bool { return time.Now().After(at) }, wait, time.Millisecond)
}

// A message whose absolute-expiry-time has passed is dropped, never
// delivered, and counted; the depth does not count it.
func TestExpiredMessageIsDroppedNotDelivered(t *testing.T) {
	e := newEnv(t)
	q := address.Queue("exp")
	e.b.DeclareQueue("exp")
	require.NoError(t, e.b.Publish(q, expiringAt("stale", time.Now().Add(-time.Second))))
	require.NoError(t, e.b.Publish(q, amqp.NewMessage([]byte("fresh"))))
	require.Equal(t, 1, e.b.QueueDepth("exp"))
	require.Equal(t, 1, e.b.Expired("exp"))
	r := e.sub(q, 10)
	require.Equal(t, "fresh", recvBody(t, r))
	nothing(t, r)
}

// A header TTL counts from the publish: a message nobody takes is gone from
// the queue once it has passed, and a receiver attached later gets nothing.
func TestTTLExpiresAWaitingMessage(t *testing.T) {
	e := newEnv(t)
	q := address.Queue("ttl")
	e.b.DeclareQueue("ttl")
	s := e.sender(q)
	rc, err := s.Send(t.Context(), withTTL("short", 20*time.Millisecond), false)
	require.NoError(t, err)
	o, err := rc.Wait(t.Context())
	require.NoError(t, err)
	require.Equal(t, messages.Accepted, o.Kind)
	require.Eventually(t, func() bool { return e.b.QueueDepth("ttl") == 0 }, wait, time.Millisecond)
	require.Equal(t, 1, e.b.Expired("ttl"))
	nothing(t, e.sub(q, 10))
}

// Expired messages between live ones are skipped when a receiver with
// credit for all of them attaches: it gets exactly the live ones, in order.
func TestExpiredMessagesAmongLiveOnesAreSkipped(t *testing.T) {
	e := newEnv(t)
	q := address.Queue("mixed")
	e.b.DeclareQueue("mixed")
	sent := time.Now()
	require.NoError(t, e.b.Publish(q, withTTL("e1", 10*time.Millisecond)))
	require.NoError(t, e.b.Publish(q, amqp.NewMessage([]byte("l1"))))
	require.NoError(t, e.b.Publish(q, withTTL("e2", 10*time.Millisecond)))
	require.NoError(t, e.b.Publish(q, withTTL("l2", time.Hour)))
	past(t, sent.Add(20*time.Millisecond))
	r := e.sub(q, 10)
	require.Equal(t, "l1", recvBody(t, r))
	require.Equal(t, "l2", recvBody(t, r))
	nothing(t, r)
	require.Equal(t, 2, e.b.Expired("mixed"))
	require.Equal(t, 0, e.b.QueueDepth("mixed"))
}

// A message released after it expired goes back only to be dropped.
func TestReleasedAfterExpiryIsDropped(t *testing.T) {
	e := newEnv(t)
	q := address.Queue("rel")
	r := e.sub(q, 10)
	exp := time.Now().Add(20 * time.Millisecond)
	require.NoError(t, e.b.Publish(q, expiringAt("m", exp)))
	m := recv(t, r)
	past(t, exp)
	settle(t, r, m, release)
	nothing(t, r)
	require.Equal(t, 1, e.b.Expired("rel"))
	require.Equal(t, 0, e.b.QueueDepth("rel"))
	require.Equal(t, 0, e.b.Unsettled("rel"))
}

// A message one receiver marked undeliverable-here, expired by the time
// another has credit, is dropped too (the slow dispatch path).
func TestExpiryOnTheUndeliverableHerePath(t *testing.T) {
	e := newEnv(t)
	q := address.Queue("excl")
	a := e.sub(q, 1)
	b := e.sub(q, 0)
	exp := time.Now().Add(20 * time.Millisecond)
	require.NoError(t, e.b.Publish(q, expiringAt("m", exp)))
	m := recv(t, a)
	settle(t, a, m, notHere)
	past(t, exp)
	require.NoError(t, b.IssueCredit(5))
	nothing(t, b)
	require.Equal(t, 1, e.b.Expired("excl"))
}

// The earlier of TTL and absolute-expiry-time wins; a message with a TTL
// far away is delivered with its header as sent.
func TestEarlierOfTTLAndAbsoluteExpiry(t *testing.T) {
	e := newEnv(t)
	q := address.Queue("both")
	e.b.DeclareQueue("both")
	m := withTTL("ttl-first", 10*time.Millisecond)
	far := time.Now().Add(time.Hour)
	m.Properties = &amqp.MessageProperties{AbsoluteExpiryTime: &far}
	sent := time.Now()
	require.NoError(t, e.b.Publish(q, m))
	m = withTTL("abs-first", time.Hour)
	soon := time.Now().Add(10 * time.Millisecond)
	m.Properties = &amqp.MessageProperties{AbsoluteExpiryTime: &soon}
	require.NoError(t, e.b.Publish(q, m))
	require.NoError(t, e.b.Publish(q, withTTL("live", time.Hour)))
	past(t, sent.Add(20*time.Millisecond))
	past(t, soon)
	r := e.sub(q, 10)
	got := recv(t, r)
	require.Equal(t, "live", string(got.GetData()))
	require.Equal(t, time.Hour, got.Header.TTL)
	nothing(t, r)
	require.Equal(t, 2, e.b.Expired("both"))
}

// Each topic subscription's copy expires on its own queue.
func TestTopicCopiesExpire(t *testing.T) {
	e := newEnv(t)
	tp := address.Topic("exp-events")
	r1 := e.sub(tp, 0)
	r2 := e.sub(tp, 0)
	exp := time.Now().Add(10 * time.Millisecond)
	require.NoError(t, e.b.Publish(tp, expiringAt("m", exp)))
	past(t, exp)
	require.NoError(t, r1.IssueCredit(1))
	require.NoError(t, r2.IssueCredit(1))
	nothing(t, r1)
	nothing(t, r2)
}
