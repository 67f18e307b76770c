package session_test

import (
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors/session"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/test/kit/faketransport"
)

// An error reply (application-property x-amqpactor-error) reaches its
// caller as a *messages.RemoteError carrying the responder's condition and
// description and the reply itself; the requests node counts it.
func TestRequestsErrorReplyIsARemoteError(t *testing.T) {
	r := newRig(t, nil)
	book := session.NewReplies()
	r.spawn(session.NewRequests(r.env, book))
	require.NoError(t, r.request("k1").Err)
	link := r.conn.Sessions()[0].Receivers()[0]

	waiter := make(chan protocol.Reply, 1)
	_, ok := book.Register(protocol.CorrelationKey("k2"), waiter)
	require.True(t, ok)
	var corr any = "k2"
	require.True(t, link.Deliver(&amqp.Message{
		Properties: &amqp.MessageProperties{CorrelationID: corr},
		ApplicationProperties: map[string]any{
			messages.ErrorProperty:          "no such order",
			messages.ErrorConditionProperty: "app:not-found",
		},
	}))
	select {
	case got := <-waiter:
		var re *messages.RemoteError
		require.ErrorAs(t, got.Err, &re)
		require.Equal(t, "app:not-found", re.Condition)
		require.Equal(t, "no such order", re.Description)
		require.NotNil(t, re.Reply)
		require.Equal(t, "k2", re.Reply.CorrelationID)
	case <-time.After(faketransport.Bound):
		t.Fatal("the error reply never reached its caller")
	}

	// An ordinary reply is still a reply.
	_, ok = book.Register(protocol.CorrelationKey("k3"), waiter)
	require.True(t, ok)
	corr = "k3"
	require.True(t, link.Deliver(&amqp.Message{Properties: &amqp.MessageProperties{CorrelationID: corr}, Data: [][]byte{[]byte("ok")}}))
	select {
	case got := <-waiter:
		require.NoError(t, got.Err)
		require.Equal(t, "ok", string(got.Message.Body))
	case <-time.After(faketransport.Bound):
		t.Fatal("the reply never reached its caller")
	}
	n := r.node()
	require.EqualValues(t, 2, n.Counters["answered"], "%v", n.Counters)
	require.EqualValues(t, 1, n.Counters["errors"], "%v", n.Counters)
}

// An error reply without a condition, or with a description that is not a
// string, still fails its caller; an error reply whose caller gave up is an
// orphan like any other.
func TestRepliesResolveOddErrorReplies(t *testing.T) {
	r := newRig(t, nil)
	book := session.NewReplies()
	r.spawn(session.NewRequests(r.env, book))
	require.NoError(t, r.request("k1").Err)
	link := r.conn.Sessions()[0].Receivers()[0]

	waiter := make(chan protocol.Reply, 1)
	_, ok := book.Register(protocol.CorrelationKey("k2"), waiter)
	require.True(t, ok)
	var corr any = "k2"
	require.True(t, link.Deliver(&amqp.Message{Properties: &amqp.MessageProperties{CorrelationID: corr},
		ApplicationProperties: map[string]any{messages.ErrorProperty: int64(42)}}))
	select {
	case got := <-waiter:
		var re *messages.RemoteError
		require.ErrorAs(t, got.Err, &re)
		require.Empty(t, re.Condition)
		require.Equal(t, "42", re.Description)
	case <-time.After(faketransport.Bound):
		t.Fatal("the error reply never reached its caller")
	}

	corr = "gone"
	require.True(t, link.Deliver(&amqp.Message{Properties: &amqp.MessageProperties{CorrelationID: corr},
		ApplicationProperties: map[string]any{messages.ErrorProperty: "late"}}))
	require.Eventually(t, func() bool { return r.node().Counters["orphans"] == 1 }, faketransport.Bound, tick)
	n := r.node()
	require.EqualValues(t, 1, n.Counters["errors"], "an orphan is not counted as an error answered")
}

// Requests a Responder skipped because they had expired are counted on the
// requests node.
func TestRepliesCountExpiredRequests(t *testing.T) {
	r := newRig(t, nil)
	book := session.NewReplies()
	r.spawn(session.NewRequests(r.env, book))
	require.Zero(t, r.node().Counters["expired"])
	book.Expired()
	book.Expired()
	require.EqualValues(t, 2, r.node().Counters["expired"])
}
