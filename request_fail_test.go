package amqpactor_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/test/harness"
)

// A responder whose function fails answers with an error reply: the caller
// gets a *RemoteError long before its 30 s deadline (so not a timeout), the
// request is accepted (not redelivered, not dead-lettered) and the function
// ran once per request. The latencies go to the log (FIGURES).
func TestRequestResponderFailureIsRemoteError(t *testing.T) {
	noLeaks(t)
	for _, tc := range []struct {
		name       string
		fail       error
		cond, desc string
	}{
		{"error", errors.New("no such order 42"), amqpactor.CondResponderFailed, "no such order 42"},
		{"amqp error", &amqp.Error{Condition: "app:not-found", Description: "order 42"}, "app:not-found", "order 42"},
		{"reject", amqpactor.Reject(errors.New("malformed order")), amqpactor.CondRejected, "malformed order"},
		{"reject amqp error", amqpactor.Reject(&amqp.Error{Condition: amqp.ErrCondDecodeError, Description: "bad json"}),
			string(amqp.ErrCondDecodeError), "bad json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := inproc.New()
			var calls atomic.Int64
			app, _ := startResponder(t, conn, func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
				calls.Add(1)
				return nil, tc.fail
			})
			const n = 50
			res, errs, took := harness.RemoteErrors(t, app, amqpactor.Queue("rpc"), "order 42", n)
			for i, re := range res {
				require.Equal(t, "queue:rpc", re.Address)
				require.Equal(t, tc.cond, re.Condition)
				require.Equal(t, tc.desc, re.Description)
				require.Contains(t, errs[i].Error(), "queue:rpc")
				require.Contains(t, errs[i].Error(), tc.desc)
			}
			t.Logf("FIGURES in-process %s: %s", tc.name, harness.Latencies(took))

			require.Eventually(t, func() bool {
				return conn.QueueDepth("rpc") == 0 && conn.Unsettled("rpc") == 0
			}, 5*time.Second, time.Millisecond, "the failed request is settled")
			require.Empty(t, conn.DeadLetters("rpc"), "accepted after the error reply, not rejected")
			require.EqualValues(t, n, calls.Load(), "accepted after the error reply, not redelivered")
		})
	}
}

// A function that returns Release or Undeliverable hands the request to
// another consumer, as before: no error reply. A second responder that
// answers is what the caller sees.
func TestRequestReleasedByResponderIsNotAnError(t *testing.T) {
	noLeaks(t)
	conn := inproc.New()
	var once sync.Once
	app, ctx := startResponder(t, conn, func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		released := false
		once.Do(func() { released = true })
		if released {
			return nil, amqpactor.Release()
		}
		return &amqpactor.Message{Body: []byte("ok")}, nil
	})
	rep, err := app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("x")})
	require.NoError(t, err)
	require.Equal(t, "ok", string(rep.Body))
}

// A request carries its caller's deadline: header TTL (what is left) and
// absolute-expiry-time. Sent while no responder runs, it is gone from the
// queue once its deadline passed, and a responder started afterwards never
// sees it.
func TestRequestExpiresInTheQueueAtItsDeadline(t *testing.T) {
	noLeaks(t)
	conn := inproc.New()
	conn.DeclareQueue("rpc")
	caller := amqpactor.New(conn)
	bound, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, caller.Start(bound))
	defer func() { require.NoError(t, caller.Stop(context.Background())) }()

	ctx, cancelReq := context.WithTimeout(bound, 300*time.Millisecond)
	defer cancelReq()
	_, err := caller.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("stale")})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Eventually(t, func() bool { return conn.QueueDepth("rpc") == 0 }, 5*time.Second, 5*time.Millisecond,
		"the expired request is dropped from the queue")
	deadline, _ := ctx.Deadline()
	t.Logf("FIGURES in-process: the expired request was gone from the queue %v after its deadline (polled every 5 ms)",
		time.Since(deadline).Round(time.Millisecond))
	require.Equal(t, 1, conn.Expired("rpc"))

	var mu sync.Mutex
	var seen []string
	responder := amqpactor.New(conn)
	_, err = responder.Subscribe(amqpactor.Queue("rpc"), amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		mu.Lock()
		seen = append(seen, string(req.Body))
		mu.Unlock()
		return &amqpactor.Message{Body: req.Body}, nil
	}), amqpactor.WithPartitions(1)) // the queue's order: the stale request would come first
	require.NoError(t, err)
	require.NoError(t, responder.Start(bound))
	defer func() { require.NoError(t, responder.Stop(context.Background())) }()
	rep, err := caller.Request(bound, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("fresh")})
	require.NoError(t, err)
	require.Equal(t, "fresh", string(rep.Body))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"fresh"}, seen, "the expired request never reaches a responder")
}

// The request on the wire: TTL is what is left of the deadline (never more),
// absolute-expiry-time the deadline itself; a shorter TTL or an earlier
// expiry of the caller's own is kept. Without a deadline neither is set.
func TestRequestCarriesItsDeadline(t *testing.T) {
	noLeaks(t)
	conn := inproc.New()
	got := make(chan *amqpactor.Message, 4)
	app, bound := startResponder(t, conn, func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		got <- req
		return &amqpactor.Message{}, nil
	})
	next := func() *amqpactor.Message {
		select {
		case m := <-got:
			return m
		case <-bound.Done():
			t.Fatal("the responder never got the request")
			return nil
		}
	}

	ctx, cancel := context.WithTimeout(bound, 10*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	_, err := app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{})
	require.NoError(t, err)
	m := next()
	require.Positive(t, m.TTL)
	require.LessOrEqual(t, m.TTL, 10*time.Second)
	require.Equal(t, deadline.UnixMilli(), m.AbsoluteExpiryTime.UnixMilli())

	mine := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
	_, err = app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{TTL: time.Second, AbsoluteExpiryTime: mine})
	require.NoError(t, err)
	m = next()
	require.Equal(t, time.Second, m.TTL, "the caller's shorter TTL is kept")
	require.Equal(t, mine.UnixMilli(), m.AbsoluteExpiryTime.UnixMilli(), "the caller's earlier expiry is kept")

	// bound's deadline is startResponder's; a context without one sets none.
	nodl, cancelNodl := context.WithCancel(context.Background())
	defer cancelNodl()
	stop := context.AfterFunc(bound, cancelNodl)
	defer stop()
	_, err = app.Request(nodl, amqpactor.Queue("rpc"), &amqpactor.Message{})
	require.NoError(t, err)
	m = next()
	require.Zero(t, m.TTL)
	require.True(t, m.AbsoluteExpiryTime.IsZero())
}

// A Responder that takes a request whose absolute-expiry-time has passed
// (it expired while waiting behind another one) accepts it without calling
// its function, and counts it on the requests node ("expired").
func TestResponderSkipsAnExpiredRequest(t *testing.T) {
	noLeaks(t)
	conn := inproc.New()
	held, release := make(chan struct{}), make(chan struct{})
	var bodies []string
	var mu sync.Mutex
	app, ctx := startResponder(t, conn, func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		mu.Lock()
		bodies = append(bodies, string(req.Body))
		mu.Unlock()
		if string(req.Body) == "hold" {
			close(held)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return &amqpactor.Message{}, nil
	}, amqpactor.WithBackoff(10*time.Millisecond, 100*time.Millisecond))

	replyTo, group := "nobody-waits", "g"
	conn.DeclareQueue(replyTo)
	require.NoError(t, conn.Publish(amqpactor.Queue("rpc"), &amqp.Message{Data: [][]byte{[]byte("hold")},
		Properties: &amqp.MessageProperties{MessageID: "1", ReplyTo: &replyTo, GroupID: &group}}))
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the responder never got the first request")
	}
	// Behind "hold" on its partition (same group-id): it expires waiting.
	exp := time.Now().Add(time.Second)
	require.NoError(t, conn.Publish(amqpactor.Queue("rpc"), &amqp.Message{Data: [][]byte{[]byte("stale")},
		Properties: &amqp.MessageProperties{MessageID: "2", ReplyTo: &replyTo, AbsoluteExpiryTime: &exp, GroupID: &group}}))
	require.Eventually(t, func() bool { return conn.Unsettled("rpc") == 2 }, 5*time.Second, time.Millisecond,
		"the second request is out for delivery before it expires")
	require.Eventually(t, func() bool { return time.Now().After(exp) }, 5*time.Second, 10*time.Millisecond)
	close(release)

	require.Eventually(t, func() bool { return conn.Unsettled("rpc") == 0 && conn.QueueDepth("rpc") == 0 },
		5*time.Second, time.Millisecond, "both settled")
	mu.Lock()
	require.Equal(t, []string{"hold"}, bodies, "the expired request never reached the function")
	mu.Unlock()
	require.Empty(t, conn.DeadLetters("rpc"), "accepted, not rejected")
	require.Equal(t, 1, conn.QueueDepth(replyTo), "only the first request was answered")
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	req := find(tree, "requests", "")
	require.NotNil(t, req)
	require.EqualValues(t, 1, req.Counters["expired"], "%v", req.Counters)
}

// A responder whose function panics answers with an error reply too: the
// caller gets a *RemoteError naming the panic, not a timeout.
func TestRequestResponderPanicIsRemoteError(t *testing.T) {
	noLeaks(t)
	conn := inproc.New()
	app, _ := startResponder(t, conn, func(context.Context, *amqpactor.Message) (*amqpactor.Message, error) {
		panic("order book corrupt")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("order 42")})
	var re *amqpactor.RemoteError
	require.ErrorAs(t, err, &re, "want a *RemoteError, not a timeout")
	require.NoError(t, ctx.Err())
	require.Equal(t, amqpactor.CondResponderFailed, re.Condition)
	require.Contains(t, re.Description, "order book corrupt")
}
