package live

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/harness"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// idle is the senders' idle time in these tests: short, so that retirement
// is seen within them.
const idle = 500 * time.Millisecond

// admin opens a management connection for the test, closed at its end.
func admin(t *testing.T, u string) *amqpwire.Management {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := amqpwire.New(amqpwire.Config{URL: u, Dialect: amqpactor.RabbitMQ4}).Connect(ctx)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	})
	var tc transport.Conn = conn
	return tc.(*amqpwire.Conn).Management()
}

func describeTree(n *amqpactor.Node) string {
	if n == nil {
		return "(none)"
	}
	s := fmt.Sprintf("%s[%s %s %v]", n.Name, n.Kind, n.State, n.Counters)
	for _, c := range n.Children {
		s += " " + describeTree(c)
	}
	return s
}

// quiet waits until every sender of app has retired and the goroutines are
// at most base, and returns the goroutine count then.
func quiet(t *testing.T, app *amqpactor.App, base int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		n, err := harness.CountKind(app, "sender", 500*time.Millisecond)
		if err == nil && n == 0 && (base < 0 || runtime.NumGoroutine() <= base) {
			return runtime.NumGoroutine()
		}
		if time.Now().After(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			tree, _ := app.Tree(ctx)
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("senders did not all retire, or goroutines did not return to %d: %d sender nodes (%v), %d goroutines\ntree: %s\n%s",
				base, n, err, runtime.NumGoroutine(), describeTree(tree), buf)
		}
	}
}

// TestLiveRepliesNeverShareFateWithOwnPublishes: a Responder answers
// 10,000 requests, published by a raw go-amqp client, each with a reply-to
// of its own (a third name queues that do not exist; of the rest, a
// hundred name declared queues, a few as each classic queue holding a
// message keeps a file open, and the others an exchange and a routing key
// of their own, bound to one queue), while the App publishes 10,000
// messages to its own queue. Not
// one of its own publishes fails, no missing queue is created, every other
// reply arrives, and the sender links and goroutines stay bounded and go
// once idle.
func TestLiveRepliesNeverShareFateWithOwnPublishes(t *testing.T) {
	u := brokerURL(t)
	m := admin(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	p := unique("live.send")
	rpc, own, replies, x := p+".rpc", p+".own", p+".replies", p+".x"
	const n, queues = 10000, 100
	missing := func(i int) bool { return i%3 == 0 }
	replyTo := func(i int) string {
		switch {
		case missing(i):
			return "/queues/" + p + ".missing." + strconv.Itoa(i)
		case i < 3*queues && i%3 == 1:
			return "/queues/" + p + ".rq." + strconv.Itoa(i)
		}
		return "/exchanges/" + x + "/k." + strconv.Itoa(i)
	}
	var declared []string
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, q := range declared {
			_ = brokeradmin.DeleteQueue(ctx, m, q)
		}
		_ = brokeradmin.DeleteExchange(ctx, m, x)
	})
	declare := func(q string) {
		declared = append(declared, q)
		_, err := m.DeclareQueue(ctx, amqpwire.QueueSpec{Name: q, Type: amqpwire.Classic})
		require.NoError(t, err)
	}
	for _, q := range []string{rpc, own, replies} {
		declare(q)
	}
	require.NoError(t, m.DeclareExchange(ctx, amqpwire.ExchangeSpec{Name: x, Type: "fanout"}))
	require.NoError(t, m.Bind(ctx, amqpwire.Binding{Source: x, Queue: replies}))
	wantInReplies := 0
	for i := range n {
		switch {
		case missing(i):
		case i < 3*queues && i%3 == 1:
			declare(p + ".rq." + strconv.Itoa(i))
		default:
			wantInReplies++
		}
	}
	// The missing ones, so that the clean-up also removes one created by mistake.
	for i := range n {
		if missing(i) {
			declared = append(declared, p+".missing."+strconv.Itoa(i))
		}
	}

	logs := &harness.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	app := amqpactor.New(amqpactor.Dial(u, amqpactor.WithDialect(amqpactor.RabbitMQ4)),
		amqpactor.WithSenderLimits(0, idle), amqpactor.WithLogger(log))
	var handled atomic.Int64
	_, err := app.Subscribe(amqpactor.Queue(rpc), amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		handled.Add(1)
		return &amqpactor.Message{Body: req.Body}, nil
	}), amqpactor.WithClassicQueue())
	require.NoError(t, err)
	start(t, app)

	// The raw client that sends the requests.
	client, err := amqp.Dial(ctx, u, nil)
	require.NoError(t, err)
	defer client.Close()
	sess, err := client.NewSession(ctx, nil)
	require.NoError(t, err)
	snd, err := sess.NewSender(ctx, "/queues/"+rpc, nil)
	require.NoError(t, err)
	sendRequest := func(i int) amqp.SendReceipt {
		to := replyTo(i)
		msg := amqp.NewMessage([]byte("req-" + strconv.Itoa(i)))
		msg.Properties = &amqp.MessageProperties{MessageID: "req-" + strconv.Itoa(i), ReplyTo: &to}
		r, err := snd.SendWithReceipt(ctx, msg, nil)
		require.NoError(t, err)
		return r
	}

	// Warm-up: the first reply and the first own publish open the
	// publishers' sessions, which stay; the baseline is the quiet App
	// after them.
	r := sendRequest(1)
	_, err = r.Wait(ctx)
	require.NoError(t, err)
	require.NoError(t, app.Publish(ctx, amqpactor.Queue(own), &amqpactor.Message{Body: []byte("warm-up")}))
	require.Eventually(t, func() bool { return handled.Load() == 1 }, 10*time.Second, 10*time.Millisecond)
	base := quiet(t, app, -1)

	s := harness.SamplePeaks(app, 10*time.Millisecond, 500*time.Millisecond)
	began := time.Now()
	var wg sync.WaitGroup
	var ownErrs atomic.Int64
	var firstErr atomic.Value
	const publishers = 8
	for w := range publishers {
		wg.Go(func() {
			for i := w; i < n; i += publishers {
				if err := app.Publish(ctx, amqpactor.Queue(own), &amqpactor.Message{Body: []byte(strconv.Itoa(i))}); err != nil {
					ownErrs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	var receipts []amqp.SendReceipt
	for i := range n {
		if i == 1 {
			continue // the warm-up's
		}
		receipts = append(receipts, sendRequest(i))
		if len(receipts) == 500 {
			for _, r := range receipts {
				st, err := r.Wait(ctx)
				require.NoError(t, err)
				require.IsType(t, &amqp.StateAccepted{}, st)
			}
			receipts = receipts[:0]
		}
	}
	for _, r := range receipts {
		_, err := r.Wait(ctx)
		require.NoError(t, err)
	}
	wg.Wait()
	require.Zero(t, ownErrs.Load(), "the App's own publishes failed; first: %v", firstErr.Load())
	require.Eventually(t, func() bool { return handled.Load() == n }, time.Minute, 20*time.Millisecond,
		"every request handled once")
	count := func(q string) uint64 {
		info, err := m.QueueInfo(ctx, q)
		require.NoError(t, err)
		return info.Messages
	}
	require.Eventually(t, func() bool { return count(replies) == uint64(wantInReplies) }, 30*time.Second, 50*time.Millisecond,
		"every reply to an exchange arrives")
	s.Stop()
	took := time.Since(began)
	require.Equal(t, uint64(n+1), count(own), "every own publish arrived")
	for i := range 3 * queues {
		if i%3 == 1 {
			require.Equal(t, uint64(1), count(p+".rq."+strconv.Itoa(i)), "reply %d", i)
		}
		if missing(i) {
			_, err := m.QueueInfo(ctx, p+".missing."+strconv.Itoa(i))
			require.True(t, amqpwire.IsStatus(err, 404), "a missing reply-to is never declared: %v", err)
		}
	}
	require.Contains(t, logs.String(), "reply not delivered", "a failed reply is logged")
	require.Contains(t, logs.String(), p+".missing.", "naming its address")

	const bound = 2 // the dedicated sender of own, the anonymous one of replies
	t.Logf("10,000 requests (3,334 to missing queues) and 10,000 own publishes in %v: peak %d sender nodes (bound %d), peak %d goroutines (baseline %d)",
		took.Round(time.Millisecond), s.Senders.Load(), bound, s.Goroutines.Load(), base)
	require.LessOrEqual(t, int(s.Senders.Load()), bound)
	require.LessOrEqual(t, int(s.Goroutines.Load()), base+3*bound+16+publishers)
	after := quiet(t, app, base)
	t.Logf("after %v idle: 0 sender nodes, %d goroutines", idle, after)
}

// TestLivePublishToManyQueuesInTurn: an App publishes to 1,000 distinct
// existing queues in turn: every publish is accepted, the dedicated senders
// stay within their bound (the rest goes through the anonymous link), and
// all retire once idle.
func TestLivePublishToManyQueuesInTurn(t *testing.T) {
	u := brokerURL(t)
	m := admin(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := unique("live.many")
	const n = 1000
	name := func(i int) string { return fmt.Sprintf("%s.%d", p, i) }
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i := range n {
			_ = brokeradmin.DeleteQueue(ctx, m, name(i))
		}
	})
	// Quorum queues: their messages go to the broker's shared log, where a
	// classic queue holding a message keeps a file of its own open, and
	// 1,000 of them exhaust a broker run with 1,024 file descriptors
	// (RabbitMQ then rejects publishes, then fails worse).
	for i := range n {
		_, err := m.DeclareQueue(ctx, amqpwire.QueueSpec{Name: name(i), Type: amqpwire.Quorum})
		require.NoError(t, err)
	}
	app := amqpactor.New(amqpactor.Dial(u, amqpactor.WithDialect(amqpactor.RabbitMQ4)), amqpactor.WithSenderLimits(0, idle))
	start(t, app)
	require.NoError(t, app.Publish(ctx, amqpactor.Queue(name(0)), &amqpactor.Message{Body: []byte("warm-up")}))
	base := quiet(t, app, -1)

	s := harness.SamplePeaks(app, 10*time.Millisecond, 500*time.Millisecond)
	began := time.Now()
	for i := range n {
		require.NoError(t, app.Publish(ctx, amqpactor.Queue(name(i)), &amqpactor.Message{Body: []byte(strconv.Itoa(i))}))
	}
	took := time.Since(began)
	s.Stop()
	for i := range n {
		info, err := m.QueueInfo(ctx, name(i))
		require.NoError(t, err)
		want := uint64(1)
		if i == 0 {
			want = 2
		}
		require.Equal(t, want, info.Messages, "queue %d", i)
	}
	bound := amqpactor.DefaultMaxSenders + 1
	t.Logf("1,000 queues in turn in %v: peak %d sender nodes (bound %d), peak %d goroutines (baseline %d)",
		took.Round(time.Millisecond), s.Senders.Load(), bound, s.Goroutines.Load(), base)
	require.LessOrEqual(t, int(s.Senders.Load()), bound)
	// Per sender node: writer, confirmer, and while one retires the
	// goroutine that closes its link (a shared machine once showed 245
	// against a bound of 3 per node, 236).
	require.LessOrEqual(t, int(s.Goroutines.Load()), base+4*bound+16)
	after := quiet(t, app, base)
	t.Logf("after %v idle: 0 sender nodes, %d goroutines", idle, after)
}
