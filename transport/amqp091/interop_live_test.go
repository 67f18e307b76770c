package amqp091_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// crossing publishes m to a fresh queue with from and returns what the
// subscriber on to reads.
func crossing(t *testing.T, from, to amqpactor.Connector, m *amqpactor.Message) *amqpactor.Message {
	t.Helper()
	q := amqpactor.Queue(unique("amqp091-interop"))
	got := make(chan *amqpactor.Message, 1)
	sub := amqpactor.New(to, amqpactor.WithName(unique("interop-sub")))
	_, err := sub.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		select {
		case got <- m:
		default:
		}
		return nil
	})
	require.NoError(t, err)
	pub := amqpactor.New(from, amqpactor.WithName(unique("interop-pub")))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for _, app := range []*amqpactor.App{sub, pub} {
		require.NoError(t, app.Start(ctx))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			require.NoError(t, app.Stop(ctx))
		})
	}
	require.NoError(t, pub.Publish(ctx, q, m))
	select {
	case g := <-got:
		return g
	case <-ctx.Done():
		t.Fatalf("nothing crossed from %s to %s", from, to)
		return nil
	}
}

// interopMessage sets every field the 0-9-1 mapping has.
func interopMessage(now time.Time) *amqpactor.Message {
	return &amqpactor.Message{
		Body:            []byte("payload\x00\xff"),
		MessageID:       "mid-1",
		CorrelationID:   "cid-1",
		ContentType:     "application/octet-stream",
		ContentEncoding: "x-interop",
		ReplyTo:         "/queues/reply-here",
		Subject:         "the-subject",
		GroupID:         "group-1",
		UserID:          []byte("guest"),
		CreationTime:    now,
		Durable:         true,
		Priority:        7,
		TTL:             90 * time.Minute,
		Headers:         map[string]any{"string": "naïve ✓", "long": int64(-64), "bool": true, "binary": []byte{0, 1, 255}},
		Annotations:     map[string]any{"x-opt-interop": "a"},
	}
}

// requireCrossed asserts the fields RabbitMQ 4 converts between AMQP 1.0
// and 0-9-1, both ways; reply-to is to arrive as replyTo.
func requireCrossed(t *testing.T, sent, got *amqpactor.Message, binaryAsString bool, replyTo string) {
	t.Helper()
	require.Equal(t, sent.Body, got.Body, "body")
	require.Equal(t, sent.MessageID, got.MessageID, "message-id")
	require.Equal(t, sent.CorrelationID, got.CorrelationID, "correlation-id")
	require.Equal(t, sent.ContentType, got.ContentType, "content-type")
	require.Equal(t, sent.ContentEncoding, got.ContentEncoding, "content-encoding")
	require.Equal(t, replyTo, got.ReplyTo, "reply-to")
	require.Equal(t, sent.GroupID, got.GroupID, "group-id (0-9-1 app-id)")
	require.Equal(t, sent.UserID, got.UserID, "user-id")
	require.True(t, sent.CreationTime.Truncate(time.Second).Equal(got.CreationTime), "creation-time to the second (0-9-1 timestamp): sent %v, got %v", sent.CreationTime, got.CreationTime)
	require.True(t, got.Durable, "durable (delivery-mode 2)")
	require.EqualValues(t, 7, got.Priority, "priority")
	require.Equal(t, sent.TTL, got.TTL, "ttl (expiration)")
	for k, v := range sent.Headers {
		if b, ok := v.([]byte); ok && binaryAsString {
			// RabbitMQ 4 writes an AMQP 1.0 binary as a 0-9-1 long string.
			v = string(b)
		}
		require.Equal(t, v, got.Headers[k], "header %s", k)
	}
	require.Equal(t, "a", got.Annotations["x-opt-interop"], "an x- annotation (a 0-9-1 header)")
	require.Zero(t, got.DeliveryCount)
	require.True(t, got.FirstAcquirer)
}

// TestLiveInterop: a message crosses from AMQP 0-9-1 (Dial091) to AMQP
// 1.0 (Dial) through RabbitMQ 4 and back, keeping every field RabbitMQ
// converts. The subject crosses one way only: RabbitMQ hands 0-9-1's type
// to an AMQP 1.0 reader as the annotation x-basic-type, and drops 1.0's
// subject on the way to 0-9-1; an AMQP 1.0 binary header arrives in 0-9-1
// as a string. RabbitMQ 4.0 hands reply-to over as it is; 4.2 and later
// read a 0-9-1 reply-to as a queue name and a 1.0 one as an address, and
// convert between the two (each expectation below says which release it
// holds for).
func TestLiveInterop(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 / 1.0 interop test")
	v := livetest.RabbitMQ(t, url)
	converts := v.AtLeast(4, 2)
	c091 := amqpactor.Dial091(url)
	c10 := amqpactor.Dial(url, amqpactor.WithDialect(amqpactor.RabbitMQ4))
	now := time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

	t.Run("0-9-1 to 1.0", func(t *testing.T) {
		sent := interopMessage(now)
		want := sent.ReplyTo // RabbitMQ 4.0
		if converts {
			// RabbitMQ 4.2+: the 0-9-1 reply-to is a queue name, so the
			// address form itself is the name, percent-encoded.
			want = "/queues/%2Fqueues%2Freply-here"
		}
		got := crossing(t, c091, c10, sent)
		requireCrossed(t, sent, got, false, want)
		t.Logf("RabbitMQ %v: 0-9-1 reply-to %q arrives over 1.0 as %q", v, sent.ReplyTo, got.ReplyTo)
		require.Equal(t, sent.Subject, got.Annotations["x-basic-type"], "subject, as 0-9-1's type")
		t.Logf("0-9-1 -> 1.0: headers %v, annotations %v", got.Headers, got.Annotations)
	})
	t.Run("1.0 to 0-9-1", func(t *testing.T) {
		sent := interopMessage(now)
		want := sent.ReplyTo // RabbitMQ 4.0
		if converts {
			want = "reply-here" // RabbitMQ 4.2+: the queue the address names
		}
		got := crossing(t, c10, c091, sent)
		requireCrossed(t, sent, got, true, want)
		t.Logf("RabbitMQ %v: 1.0 reply-to %q arrives over 0-9-1 as %q", v, sent.ReplyTo, got.ReplyTo)
		require.Empty(t, got.Subject, "RabbitMQ 4 does not convert the subject")
		t.Logf("1.0 -> 0-9-1: headers %v, annotations %v", got.Headers, got.Annotations)
	})
}

// TestLiveInteropRequestReply: a request from one protocol answered by a
// Responder on the other. A 1.0 requester's reply queue is an ordinary
// queue a 0-9-1 responder publishes to. A 0-9-1 requester's direct
// reply-to address cannot be answered over 1.0 on RabbitMQ 4.0, which has
// direct reply-to on 0-9-1 only; from 4.2 on it can.
func TestLiveInteropRequestReply(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 / 1.0 request/reply interop test")
	v := livetest.RabbitMQ(t, url)
	c091 := amqpactor.Dial091(url)
	c10 := amqpactor.Dial(url, amqpactor.WithDialect(amqpactor.RabbitMQ4))
	run := func(t *testing.T, requester, responder amqpactor.Connector) error {
		q := amqpactor.Queue(unique("amqp091-interop-rpc"))
		newSide(t, url).deleteQueue(q.Name())
		srv := amqpactor.New(responder, amqpactor.WithName(unique("interop-srv")))
		_, err := srv.Subscribe(q, amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
			return &amqpactor.Message{Body: append([]byte("re:"), req.Body...)}, nil
		}))
		require.NoError(t, err)
		cli := amqpactor.New(requester, amqpactor.WithName(unique("interop-cli")))
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		for _, app := range []*amqpactor.App{srv, cli} {
			require.NoError(t, app.Start(ctx))
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), waitFor)
				defer cancel()
				require.NoError(t, app.Stop(ctx))
			})
		}
		rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
		defer rcancel()
		rep, err := cli.Request(rctx, q, &amqpactor.Message{Body: []byte("ping")})
		if err != nil {
			return err
		}
		require.Equal(t, "re:ping", string(rep.Body))
		return nil
	}
	t.Run("1.0 requester, 0-9-1 responder", func(t *testing.T) {
		require.NoError(t, run(t, c10, c091))
	})
	t.Run("0-9-1 requester, 1.0 responder", func(t *testing.T) {
		err := run(t, c091, c10)
		if v.AtLeast(4, 2) {
			require.NoError(t, err, "a 0-9-1 request answered over 1.0 (RabbitMQ %v)", v)
			return
		}
		// RabbitMQ 4.0 has direct reply-to on 0-9-1 only: the reply
		// published over 1.0 never reaches the requester, who waits out
		// its context.
		require.ErrorIs(t, err, context.DeadlineExceeded, "a 0-9-1 request answered over 1.0 (RabbitMQ %v)", v)
	})
}
