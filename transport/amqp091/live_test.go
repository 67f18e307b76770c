package amqp091_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/amqp091"
)

// startApp starts an App on Dial091 with subs already subscribed, and
// stops it when the test ends.
func startApp(t *testing.T, url string, subscribe func(app *amqpactor.App), opts ...amqpactor.DialOption) *amqpactor.App {
	t.Helper()
	opts = append([]amqpactor.DialOption{amqpactor.WithContainerID(unique("amqp091-test"))}, opts...)
	app := amqpactor.New(amqpactor.Dial091(url, opts...),
		amqpactor.WithBackoff(5*time.Millisecond, 200*time.Millisecond), amqpactor.WithName(unique("app")))
	if subscribe != nil {
		subscribe(app)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		require.NoError(t, app.Stop(ctx))
	})
	return app
}

// TestLivePrefetchBoundsUnacked: two competing consumers with a window
// (WithCredit) of 2 and a slow handler each hold at most 2 unacknowledged
// deliveries at any time, as the broker counts them (rabbitmqctl), and
// every message is handled once.
func TestLivePrefetchBoundsUnacked(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 prefetch test")
	q := amqpactor.Queue(unique("amqp091-prefetch"))
	s := newSide(t, url)
	s.deleteQueue(q.Name())
	const n = 20
	release := make(chan struct{})
	var handled sync.Map
	var total atomic.Int64
	inFlight := [2]atomic.Int64{}
	maxInFlight := [2]atomic.Int64{}
	for i := range 2 {
		startApp(t, url, func(app *amqpactor.App) {
			_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
				now := inFlight[i].Add(1)
				defer inFlight[i].Add(-1)
				for {
					old := maxInFlight[i].Load()
					if now <= old || maxInFlight[i].CompareAndSwap(old, now) {
						break
					}
				}
				select {
				case <-release: // the slow part
				case <-ctx.Done():
					return ctx.Err()
				}
				handled.Store(m.MessageID, true)
				total.Add(1)
				return nil
			}, amqpactor.WithCredit(2), amqpactor.WithPartitions(4))
			require.NoError(t, err)
		})
	}
	pub := startApp(t, url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for i := range n {
		require.NoError(t, pub.Publish(ctx, q, &amqpactor.Message{MessageID: fmt.Sprint("m", i), Body: []byte("x")}))
	}
	// Both consumers fill their window and no more.
	require.Eventually(t, func() bool { return inFlight[0].Load() == 2 && inFlight[1].Load() == 2 },
		waitFor, 5*time.Millisecond, "each consumer holds its window")
	samples := [][]int{bothConsumers(t, q.Name())}
	require.Equal(t, []int{2, 2}, samples[0], "unacknowledged per consumer while both handlers wait")
	for i := range n {
		release <- struct{}{}
		if i%5 == 4 && i < n-4 {
			got := bothConsumers(t, q.Name())
			samples = append(samples, got)
			for _, u := range got {
				require.LessOrEqual(t, u, 2, "unacknowledged deliveries of one consumer after %d handled", i+1)
			}
		}
	}
	require.Eventually(t, func() bool { return total.Load() == n }, waitFor, 5*time.Millisecond, "every message handled")
	count := 0
	handled.Range(func(any, any) bool { count++; return true })
	require.Equal(t, n, count, "distinct messages handled")
	require.LessOrEqual(t, maxInFlight[0].Load(), int64(2))
	require.LessOrEqual(t, maxInFlight[1].Load(), int64(2))
	t.Logf("unacknowledged per consumer, sampled on the broker: %v; most handlers at once: %d and %d",
		samples, maxInFlight[0].Load(), maxInFlight[1].Load())
}

// bothConsumers is unacked for q's two consumers. rabbitmqctl answers the
// consumers and their channels in two commands, two snapshots, and
// list_channels leaves out a channel that does not answer in time: a reading
// that misses a consumer is taken again, within a bound, not counted as a
// consumer that holds nothing.
func bothConsumers(t *testing.T, q string) []int {
	t.Helper()
	var got []int
	require.Eventually(t, func() bool { got = unacked(t, q); return len(got) == 2 },
		waitFor, 50*time.Millisecond, "both consumers of %s and their channels listed by rabbitmqctl", q)
	return got
}

// connect opens a connection with the transport alone.
func connect(t *testing.T, url string) transport.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	c, err := amqp091.New(amqp091.Config{URL: url}).Connect(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// TestLiveClosedChannelRedelivers: deliveries a channel holds when it
// closes come back to the next consumer marked redelivered (FirstAcquirer
// false), counted by the quorum queue.
func TestLiveClosedChannelRedelivers(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 redelivery test")
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	q := address.Queue(unique("amqp091-redeliver"))
	newSide(t, url).deleteQueue(q.Name())
	c := connect(t, url)

	ps, err := c.NewSession(ctx)
	require.NoError(t, err)
	snd, err := ps.NewSender(ctx, transport.SenderOptions{Address: q})
	require.NoError(t, err)
	s1, err := c.NewSession(ctx)
	require.NoError(t, err)
	r1, err := s1.NewReceiver(ctx, transport.ReceiverOptions{Address: q, Credit: 5})
	require.NoError(t, err)
	for i := range 3 {
		rc, err := snd.Send(ctx, &amqp.Message{Data: [][]byte{[]byte("x")}, Properties: &amqp.MessageProperties{MessageID: fmt.Sprint("m", i)}}, false)
		require.NoError(t, err)
		o, err := rc.Wait(ctx)
		require.NoError(t, err)
		require.Equal(t, messages.Accepted, o.Kind)
	}
	require.NoError(t, r1.IssueCredit(5))
	for range 3 {
		m, err := r1.Receive(ctx)
		require.NoError(t, err)
		require.True(t, m.Header.FirstAcquirer, "a first delivery")
	}
	require.NoError(t, s1.Close(ctx), "closing the channel with 3 unacknowledged deliveries")
	_, err = r1.Receive(ctx)
	require.Error(t, err, "a receiver whose channel closed")

	s2, err := c.NewSession(ctx)
	require.NoError(t, err)
	r2, err := s2.NewReceiver(ctx, transport.ReceiverOptions{Address: q, Credit: 5})
	require.NoError(t, err)
	require.NoError(t, r2.IssueCredit(5))
	seen := map[any]bool{}
	for range 3 {
		m, err := r2.Receive(ctx)
		require.NoError(t, err)
		require.False(t, m.Header.FirstAcquirer, "%v: redelivered", m.Properties.MessageID)
		require.EqualValues(t, 1, m.Header.DeliveryCount, "%v: x-delivery-count", m.Properties.MessageID)
		require.NoError(t, r2.Settle(ctx, m, messages.Outcome{Kind: messages.Accepted}))
		seen[m.Properties.MessageID] = true
	}
	require.Len(t, seen, 3)
	require.NoError(t, s2.Close(ctx))
	require.NoError(t, ps.Close(ctx))
}

// TestLiveTransactions: a committed transaction's 100 publishes are all on
// the queue, a rolled back one's never are.
func TestLiveTransactions(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 transaction test")
	q := amqpactor.Queue(unique("amqp091-txn"))
	s := newSide(t, url)
	s.deleteQueue(q.Name())
	app := startApp(t, url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	const n = 100
	err := app.Transaction(ctx, func(tx *amqpactor.Tx) error {
		for i := range n {
			if err := tx.Publish(ctx, q, &amqpactor.Message{MessageID: fmt.Sprint("c", i), Body: []byte("c")}); err != nil {
				return err
			}
		}
		if d := s.depth(q.Name()); d != 0 {
			return fmt.Errorf("%d messages visible before commit", d)
		}
		return nil
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.depth(q.Name()) == n }, waitFor, 5*time.Millisecond, "all %d after commit", n)

	plan := errors.New("roll back")
	err = app.Transaction(ctx, func(tx *amqpactor.Tx) error {
		for i := range n {
			if err := tx.Publish(ctx, q, &amqpactor.Message{MessageID: fmt.Sprint("r", i), Body: []byte("r")}); err != nil {
				return err
			}
		}
		return plan
	})
	require.ErrorIs(t, err, plan)
	// A publish after the rollback is on the queue once it is confirmed:
	// had anything of the rollback been enqueued, it would be before it.
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{MessageID: "marker", Body: []byte("m")}))
	require.Equal(t, n+1, s.depth(q.Name()), "after the rollback and one more publish")
}

// TestLiveUnroutable: a publish no queue takes (a topic nobody subscribes
// to) is an *OutcomeError, never a silent drop.
func TestLiveUnroutable(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 unroutable test")
	app := startApp(t, url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	topic := amqpactor.Topic(unique("amqp091-nobody"))
	t.Cleanup(func() {
		_ = newSide(t, url).do(func(ch *rmqChannel) error { return ch.ExchangeDelete(topic.Name(), false, false) })
	})
	err := app.Publish(ctx, topic, &amqpactor.Message{MessageID: "lost", Body: []byte("x")})
	var oe *amqpactor.OutcomeError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, messages.Released, oe.Outcome.Kind)
	require.Contains(t, oe.Outcome.Description, "NO_ROUTE")
	require.Contains(t, err.Error(), topic.Name())
	// The channel goes on.
	q := amqpactor.Queue(unique("amqp091-after"))
	newSide(t, url).deleteQueue(q.Name())
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{Body: []byte("y")}))
}

// TestLiveDirectReplyTo: Request goes through RabbitMQ's direct reply-to:
// the responder sees a reply-to the broker made (amq.rabbitmq.reply-to.…),
// not a reply queue's address.
func TestLiveDirectReplyTo(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 direct reply-to test")
	q := amqpactor.Queue(unique("amqp091-rpc"))
	newSide(t, url).deleteQueue(q.Name())
	seen := make(chan string, 10)
	startApp(t, url, func(app *amqpactor.App) {
		_, err := app.Subscribe(q, amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
			seen <- req.ReplyTo
			return &amqpactor.Message{Body: append([]byte("re:"), req.Body...)}, nil
		}))
		require.NoError(t, err)
	})
	client := startApp(t, url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for i := range 3 {
		rep, err := client.Request(ctx, q, &amqpactor.Message{Body: []byte(fmt.Sprint(i))})
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint("re:", i), string(rep.Body))
		replyTo := <-seen
		require.True(t, strings.HasPrefix(replyTo, amqp091.DirectReplyTo+"."), "reply-to %q", replyTo)
	}
}

// TestLiveAtMostOnceBounded: a pre-settled subscription is bounded by its
// window too: with WithCredit(4) and handlers that wait, 4 deliveries are
// handed out (acknowledged on arrival), 4 more wait unacknowledged in the
// client, and the rest stay on the queue.
func TestLiveAtMostOnceBounded(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 at-most-once window test")
	q := amqpactor.Queue(unique("amqp091-amo"))
	s := newSide(t, url)
	s.deleteQueue(q.Name())
	release := make(chan struct{})
	var holding atomic.Int64
	startApp(t, url, func(app *amqpactor.App) {
		_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
			holding.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}, amqpactor.AtMostOnce(), amqpactor.WithCredit(4), amqpactor.WithPartitions(8))
		require.NoError(t, err)
	})
	pub := startApp(t, url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	const n = 50
	for i := range n {
		require.NoError(t, pub.Publish(ctx, q, &amqpactor.Message{MessageID: fmt.Sprint("m", i), Body: []byte("x")}))
	}
	require.Eventually(t, func() bool { return holding.Load() == 4 }, waitFor, 5*time.Millisecond, "4 handed out")
	var ready int
	var unack []int
	require.Eventually(t, func() bool {
		ready, unack = s.depth(q.Name()), unacked(t, q.Name())
		return ready == n-8 && len(unack) == 1 && unack[0] == 4
	}, waitFor, 50*time.Millisecond, "ready and unacknowledged on the broker")
	require.EqualValues(t, 4, holding.Load(), "handlers running")
	t.Logf("at-most-once, window 4, %d published: %d handed out, %v unacknowledged in the client, %d ready on the queue", n, holding.Load(), unack, ready)
	close(release)
}

// TestLiveDeclares: what each address declares, as the broker lists it: a
// queue is a durable quorum queue (classic with WithClassicQueue), a topic
// a durable topic exchange with a transient, auto-delete (and exclusive)
// subscription queue bound to it with "#".
func TestLiveDeclares(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 declaration test")
	s := newSide(t, url)
	qq, cq, topic := amqpactor.Queue(unique("amqp091-qq")), amqpactor.Queue(unique("amqp091-cq")), amqpactor.Topic(unique("amqp091-topic"))
	s.deleteQueue(qq.Name())
	s.deleteQueue(cq.Name())
	t.Cleanup(func() { _ = s.do(func(ch *rmqChannel) error { return ch.ExchangeDelete(topic.Name(), false, false) }) })
	noop := func(ctx context.Context, m *amqpactor.Message) error { return nil }
	startApp(t, url, func(app *amqpactor.App) {
		_, err := app.Subscribe(qq, noop)
		require.NoError(t, err)
		_, err = app.Subscribe(cq, noop, amqpactor.WithClassicQueue())
		require.NoError(t, err)
		_, err = app.Subscribe(topic, noop, amqpactor.WithSubscriptionName("sub"))
		require.NoError(t, err)
	})
	queues := map[string]string{}
	for _, l := range ctl(t, "list_queues", "name", "type", "durable", "auto_delete") {
		f := strings.Fields(l)
		if len(f) == 4 {
			queues[f[0]] = strings.Join(f[1:], " ")
		}
	}
	require.Equal(t, "quorum true false", queues[qq.Name()], "a queue")
	require.Equal(t, "classic true false", queues[cq.Name()], "a queue WithClassicQueue")
	require.Equal(t, "classic false true", queues[topic.Name()+".sub"], "a topic subscription's queue (exclusive too)")
	exchanges := map[string]string{}
	for _, l := range ctl(t, "list_exchanges", "name", "type", "durable") {
		f := strings.Fields(l)
		if len(f) == 3 {
			exchanges[f[0]] = f[1] + " " + f[2]
		}
	}
	require.Equal(t, "topic true", exchanges[topic.Name()], "a topic")
	bound := false
	for _, l := range ctl(t, "list_bindings", "source_name", "destination_name", "routing_key") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == topic.Name() && f[1] == topic.Name()+".sub" && f[2] == "#" {
			bound = true
		}
	}
	require.True(t, bound, "the subscription queue bound to the topic with #")
}

// receiverCounters finds the counters of the receiver of the only
// subscription of app.
func receiverCounters(t *testing.T, app *amqpactor.App) map[string]uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	root, err := app.Tree(ctx)
	require.NoError(t, err)
	var found map[string]uint64
	var walk func(n *amqpactor.Node)
	walk = func(n *amqpactor.Node) {
		if n.Kind == "receiver" {
			found = n.Counters
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(root)
	return found
}

// TestLiveMaxMessageSize: a delivery over WithMaxMessageSize is rejected
// alone as poison, its handler never called; the subscription goes on.
func TestLiveMaxMessageSize(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 max message size test")
	q := amqpactor.Queue(unique("amqp091-big"))
	newSide(t, url).deleteQueue(q.Name())
	var mu sync.Mutex
	var got []int
	sub := startApp(t, url, func(app *amqpactor.App) {
		_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
			mu.Lock()
			got = append(got, len(m.Body))
			mu.Unlock()
			return nil
		}, amqpactor.WithPartitions(1))
		require.NoError(t, err)
	}, amqpactor.WithMaxMessageSize(1024))
	pub := startApp(t, url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, pub.Publish(ctx, q, &amqpactor.Message{Body: make([]byte, 4096)}))
	require.NoError(t, pub.Publish(ctx, q, &amqpactor.Message{Body: make([]byte, 100)}))
	require.Eventually(t, func() bool {
		c := receiverCounters(t, sub)
		return c["poison"] == 1 && c["rejected"] == 1 && c["accepted"] == 1
	}, waitFor, 5*time.Millisecond, "one poison rejected, one accepted")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{100}, got, "the handler saw only the small message")
}
