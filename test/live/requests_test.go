package live

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/harness"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// On RabbitMQ 4, a request whose responder fails returns a *RemoteError
// long before its 30 s deadline (so it did not time out); the request is
// accepted, not redelivered. The latencies go to the log (FIGURES).
func TestLiveRequestResponderFailureIsRemoteError(t *testing.T) {
	u := brokerURL(t)
	q := amqpactor.Queue(unique("live.rpcfail"))
	app := newApp(t, u, nil)
	var failed atomic.Int64
	_, err := app.Subscribe(q, amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		if string(req.Body) == "ok" {
			return &amqpactor.Message{Body: []byte("fine")}, nil
		}
		failed.Add(1)
		return nil, errors.New("no such order " + string(req.Body))
	}))
	require.NoError(t, err)
	start(t, app)
	t.Cleanup(func() { _ = brokeradmin.DeleteQueue(context.Background(), admin(t, u), q.Name()) })

	const n = 50
	res, _, took := harness.RemoteErrors(t, app, q, "42", n)
	for _, re := range res {
		require.Equal(t, q.String(), re.Address)
		require.Equal(t, amqpactor.CondResponderFailed, re.Condition)
		require.Equal(t, "no such order 42", re.Description)
	}
	t.Logf("FIGURES live RabbitMQ 4 (quorum): %s", harness.Latencies(took))

	ctx := bound(t)
	rep, err := app.Request(ctx, q, &amqpactor.Message{Body: []byte("ok")})
	require.NoError(t, err)
	require.Equal(t, "fine", string(rep.Body))
	m := admin(t, u)
	require.Eventually(t, func() bool {
		info, err := m.QueueInfo(ctx, q.Name())
		return err == nil && info.Messages == 0
	}, 10*time.Second, 20*time.Millisecond, "every failed request was settled")
	require.EqualValues(t, n, failed.Load(), "accepted after the error reply, never redelivered")
}

// On RabbitMQ 4, a request sent while no responder runs carries its
// deadline as header TTL: the broker drops it from the queue (quorum and
// classic) once the deadline passed, and a responder started afterwards
// never sees it.
func TestLiveRequestExpiresInTheQueue(t *testing.T) {
	u := brokerURL(t)
	for _, tc := range []struct {
		name string
		kind amqpwire.QueueType
	}{{"quorum", amqpwire.Quorum}, {"classic", amqpwire.Classic}} {
		t.Run(tc.name, func(t *testing.T) {
			name := unique("live.rpcexp." + tc.name)
			m := admin(t, u)
			ctx := bound(t)
			_, err := m.DeclareQueue(ctx, amqpwire.QueueSpec{Name: name, Type: tc.kind})
			require.NoError(t, err)
			t.Cleanup(func() { _ = brokeradmin.DeleteQueue(context.Background(), m, name) })
			q := amqpactor.Raw(amqpwire.QueuePath(name))

			caller := newApp(t, u, nil)
			start(t, caller)
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err = caller.Request(rctx, q, &amqpactor.Message{Body: []byte("stale")})
			require.ErrorIs(t, err, context.DeadlineExceeded)
			// A message without a ttl, behind it, stays: the queue holds
			// messages, and only the expired one goes.
			require.NoError(t, caller.Publish(ctx, q, &amqpactor.Message{Body: []byte("control"), ReplyTo: "nobody"}))
			require.Eventually(t, func() bool {
				info, err := m.QueueInfo(ctx, name)
				return err == nil && info.Messages == 1
			}, 15*time.Second, 20*time.Millisecond, "the expired request is dropped from the queue")
			deadline, _ := rctx.Deadline()
			t.Logf("FIGURES live RabbitMQ 4 (%s): the expired request was gone from the queue %v after its deadline (polled every 20 ms)",
				tc.name, time.Since(deadline).Round(time.Millisecond))

			var mu sync.Mutex
			var seen []string
			responder := newApp(t, u, nil)
			_, err = responder.Subscribe(q, amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
				mu.Lock()
				seen = append(seen, string(req.Body))
				mu.Unlock()
				return &amqpactor.Message{Body: req.Body}, nil
			}), amqpactor.WithPartitions(1)) // the queue's order: the stale request would come first
			require.NoError(t, err)
			start(t, responder)
			rep, err := caller.Request(ctx, q, &amqpactor.Message{Body: []byte("fresh")})
			require.NoError(t, err)
			require.Equal(t, "fresh", string(rep.Body))
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, []string{"control", "fresh"}, seen, "the expired request never reaches a responder")
		})
	}
}

// RabbitMQ 4 delivers a message whose absolute-expiry-time has passed (it
// expires by the header ttl only); a Responder accepts such a request
// without calling its function and counts it on the requests node.
func TestLiveResponderSkipsAnExpiredRequest(t *testing.T) {
	u := brokerURL(t)
	q := amqpactor.Queue(unique("live.rpcskip"))
	app := newApp(t, u, nil)
	var mu sync.Mutex
	var seen []string
	_, err := app.Subscribe(q, amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		mu.Lock()
		seen = append(seen, string(req.Body))
		mu.Unlock()
		return &amqpactor.Message{Body: req.Body}, nil
	}))
	require.NoError(t, err)
	start(t, app)
	t.Cleanup(func() { _ = brokeradmin.DeleteQueue(context.Background(), admin(t, u), q.Name()) })
	ctx := bound(t)
	reply := unique("live.rpcskip.reply")
	m := admin(t, u)
	_, err = m.DeclareQueue(ctx, amqpwire.QueueSpec{Name: reply, Type: amqpwire.Classic})
	require.NoError(t, err)
	t.Cleanup(func() { _ = brokeradmin.DeleteQueue(context.Background(), m, reply) })

	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{Body: []byte("stale"), ReplyTo: amqpwire.QueuePath(reply),
		AbsoluteExpiryTime: time.Now().Add(-time.Second)}))
	rep, err := app.Request(ctx, q, &amqpactor.Message{Body: []byte("fresh")})
	require.NoError(t, err)
	require.Equal(t, "fresh", string(rep.Body))
	require.Eventually(t, func() bool {
		tree, err := app.Tree(ctx)
		if err != nil {
			return false
		}
		n := findKind(tree, "requests")
		return n != nil && n.Counters["expired"] == 1
	}, 10*time.Second, 20*time.Millisecond, "the expired request was counted")
	mu.Lock()
	require.Equal(t, []string{"fresh"}, seen, "the expired request never reached the function")
	mu.Unlock()
	info, err := m.QueueInfo(ctx, reply)
	require.NoError(t, err)
	require.Zero(t, info.Messages, "no reply to the expired request")
	require.Eventually(t, func() bool {
		info, err := m.QueueInfo(ctx, q.Name())
		return err == nil && info.Messages == 0
	}, 10*time.Second, 20*time.Millisecond, "the expired request was accepted")
}

// findKind returns the first node of kind in n's tree.
func findKind(n *amqpactor.Node, kind string) *amqpactor.Node {
	if n.Kind == kind {
		return n
	}
	for _, c := range n.Children {
		if f := findKind(c, kind); f != nil {
			return f
		}
	}
	return nil
}

// The reply node follows the broker's release (issue 28): direct reply-to
// on RabbitMQ 4.2 and later (no queue at all), the App's reply queue on
// 4.0, and the requests node says which. 1,000 round trips pass on both,
// over AMQP 1.0 and over 0-9-1 (direct reply-to on every release).
func TestLiveReplyNodeByRelease(t *testing.T) {
	u := brokerURL(t)
	v := livetest.RabbitMQ(t, u)
	for _, proto := range []string{"amqp10", "amqp091"} {
		t.Run(proto, func(t *testing.T) {
			q := amqpactor.Queue(unique("live.replynode"))
			var app *amqpactor.App
			if proto == "amqp091" {
				app = amqpactor.New(amqpactor.Dial091(u), amqpactor.WithCloseTimeout(5*time.Second))
			} else {
				app = newApp(t, u, nil)
			}
			_, err := app.Subscribe(q, amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
				return &amqpactor.Message{Body: req.Body}, nil
			}))
			require.NoError(t, err)
			start(t, app)
			t.Cleanup(func() { _ = brokeradmin.DeleteQueue(context.Background(), admin(t, u), q.Name()) })
			ctx := bound(t)
			const n = 1000
			var wg sync.WaitGroup
			var failed atomic.Int64
			for w := range 8 {
				wg.Go(func() {
					for i := w; i < n; i += 8 {
						body := []byte(fmt.Sprint(i))
						rep, err := app.Request(ctx, q, &amqpactor.Message{Body: body})
						if err != nil || string(rep.Body) != string(body) {
							failed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			require.Zero(t, failed.Load(), "round trips that failed")
			tree, err := app.Tree(ctx)
			require.NoError(t, err)
			var req *amqpactor.Node
			for _, c := range tree.Children {
				if c.Kind == "requests" {
					req = c
				}
			}
			require.NotNil(t, req)
			want := amqpwire.ReplyQueue
			if proto == "amqp091" || v.AtLeast(4, 2) {
				want = amqpwire.ReplyDirect
			}
			require.Equal(t, want, req.ReplyNode, "RabbitMQ %v over %s: the requests node's reply node (address %s)", v, proto, req.Address)
			t.Logf("FIGURES %s: RabbitMQ %v, reply node %s, %d round trips", t.Name(), v, req.ReplyNode, n)
		})
	}
}
