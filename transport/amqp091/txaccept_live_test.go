package amqp091_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/test/kit/testproxy"
)

// consumeAndProduce is a batch handler that, inside one transaction per
// batch, publishes a message to out for each delivery and accepts it. The
// first attempt at a batch goes wrong (fail, before the commit); later
// ones commit. It records what it saw.
type consumeAndProduce struct {
	t    *testing.T
	app  *amqpactor.App
	out  amqpactor.Address
	fail func(tx *amqpactor.Tx) error

	mu        sync.Mutex
	tries     map[string]int
	committed []int // the size of each committed transaction
	redeliver int   // deliveries seen again with FirstAcquirer false
	errs      []error
}

func (c *consumeAndProduce) handle(ctx context.Context, ms []*amqpactor.Message) error {
	c.mu.Lock()
	first := false
	for _, m := range ms {
		id := m.MessageID.(string)
		if c.tries[id] == 0 {
			first = true
		} else if !m.FirstAcquirer {
			c.redeliver++
		}
		c.tries[id]++
	}
	c.mu.Unlock()
	prefix := "c-"
	if first {
		prefix = "r-"
	}
	err := c.app.Transaction(ctx, func(tx *amqpactor.Tx) error {
		for _, m := range ms {
			id := m.MessageID.(string)
			if err := tx.Publish(ctx, c.out, &amqpactor.Message{MessageID: prefix + id, Body: []byte(id)}); err != nil {
				return err
			}
			if err := tx.Accept(m); err != nil {
				return err
			}
		}
		if first {
			return c.fail(tx)
		}
		return nil
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil && !first:
		c.committed = append(c.committed, len(ms))
		// The commit accepted every message: an error now changes nothing.
		return errors.New("failed after the commit")
	case err != nil && first:
		return err
	}
	c.errs = append(c.errs, fmt.Errorf("batch of %d (first %v): %v", len(ms), first, err))
	return err
}

// outIDs takes every message off q with a plain consumer and returns their
// message-ids.
func outIDs(t *testing.T, s *side, q string) map[string]int {
	t.Helper()
	got := map[string]int{}
	require.NoError(t, s.do(func(ch *rmq.Channel) error {
		for {
			d, ok, err := ch.Get(q, true)
			if err != nil || !ok {
				return err
			}
			got[d.MessageId]++
		}
	}))
	return got
}

// runConsumeAndProduce fills in with n messages, runs c on it through
// connURL, and checks the end: out holds exactly one committed publish per
// message and nothing of the failed attempts, and in is empty, with
// nothing unacknowledged, while the App runs and after it stopped.
func runConsumeAndProduce(t *testing.T, brokerURL, connURL string, n int, c *consumeAndProduce) {
	in, out := amqpactor.Queue(unique("amqp091-txa-in")), amqpactor.Queue(unique("amqp091-txa-out"))
	s := newSide(t, brokerURL)
	s.deleteQueue(in.Name())
	s.deleteQueue(out.Name())
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	pub := startApp(t, brokerURL, nil)
	require.NoError(t, pub.Publish(ctx, out, &amqpactor.Message{MessageID: "declare", Body: []byte("x")}))
	require.Equal(t, map[string]int{"declare": 1}, outIDs(t, s, out.Name()))
	for i := range n {
		require.NoError(t, pub.Publish(ctx, in, &amqpactor.Message{MessageID: fmt.Sprintf("m%03d", i), Body: []byte("m")}))
	}
	c.t, c.out, c.tries = t, out, map[string]int{}
	app := startApp(t, connURL, func(app *amqpactor.App) {
		c.app = app
		_, err := app.SubscribeBatch(in, c.handle, amqpactor.WithCredit(uint32(n)), amqpactor.WithBatch(n, 5*time.Second))
		require.NoError(t, err)
	})
	require.Eventually(t, func() bool { return s.depth(out.Name()) == n }, waitFor, 10*time.Millisecond, "%d committed publishes", n)
	require.Eventually(t, func() bool {
		u := unacked(t, in.Name())
		return len(u) == 1 && u[0] == 0 && s.depth(in.Name()) == 0
	}, waitFor, 10*time.Millisecond, "every delivery acknowledged by the commits")
	require.NoError(t, app.Stop(ctx))
	require.Zero(t, s.depth(in.Name()), "deliveries back on the queue after the App stopped")

	got := outIDs(t, s, out.Name())
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Empty(t, c.errs)
	for i := range n {
		id := fmt.Sprintf("m%03d", i)
		require.Equal(t, 1, got["c-"+id], "committed publishes for %s", id)
		require.Zero(t, got["r-"+id], "publishes of the failed attempt for %s", id)
		require.GreaterOrEqual(t, c.tries[id], 2, "attempts at %s", id)
	}
	require.Len(t, got, n, "messages on the output queue: %v", got)
	t.Logf("committed transactions of %v deliveries each; %d deliveries seen again marked redelivered", c.committed, c.redeliver)
}

// TestLiveTransactionalAccept: a batch handler consumes and produces
// atomically. Its first transaction per batch publishes a message for
// each delivery and accepts them all, then rolls back: nothing reaches
// the output queue and the deliveries come back redelivered. The next
// commits: every publish and every acknowledgement is visible at once,
// and the handler's error after the commit sends nothing back.
func TestLiveTransactionalAccept(t *testing.T) {
	u := livetest.URL(t, "the AMQP 0-9-1 transactional accept test")
	c := &consumeAndProduce{fail: func(*amqpactor.Tx) error { return errors.New("roll back") }}
	runConsumeAndProduce(t, u, u, 100, c)
	require.NotZero(t, c.redeliver, "deliveries of a rolled back transaction come back marked redelivered")
}

// TestLiveCutBeforeCommitAcksNothing: the connection is cut while a
// transaction has published a message for each of its deliveries and
// accepted them, before its commit: the commit fails, nothing it
// published is on the output queue, and every delivery comes back and is
// handled again.
func TestLiveCutBeforeCommitAcksNothing(t *testing.T) {
	raw := livetest.URL(t, "the AMQP 0-9-1 cut-before-commit accept test")
	pu, err := url.Parse(raw)
	require.NoError(t, err)
	px := testproxy.New(t, pu.Host)
	pu.Host = px.Addr()
	c := &consumeAndProduce{fail: func(*amqpactor.Tx) error {
		if px.Cut() == 0 {
			return errors.New("no connection to cut")
		}
		return nil // commit, on a cut connection
	}}
	runConsumeAndProduce(t, raw, pu.String(), 50, c)
	for _, e := range c.errs {
		require.NotContains(t, strings.ToLower(e.Error()), "guest:guest")
	}
}

// TestLiveConcurrentTransactionalAccepts: eight partition workers of one
// subscription each consume and produce in transactions of their own, at
// once, on the subscription's one channel, mixed with plain
// acknowledgements: every transaction holds exactly its own publish and
// acknowledgement, so each input is published once and nothing is left.
func TestLiveConcurrentTransactionalAccepts(t *testing.T) {
	u := livetest.URL(t, "the AMQP 0-9-1 concurrent transactional accept test")
	in, out := amqpactor.Queue(unique("amqp091-txc-in")), amqpactor.Queue(unique("amqp091-txc-out"))
	s := newSide(t, u)
	s.deleteQueue(in.Name())
	s.deleteQueue(out.Name())
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	pub := startApp(t, u, nil)
	require.NoError(t, pub.Publish(ctx, out, &amqpactor.Message{MessageID: "declare", Body: []byte("x")}))
	outIDs(t, s, out.Name())
	var mu sync.Mutex
	var errs []error
	app := startApp(t, u, func(app *amqpactor.App) {
		_, err := app.Subscribe(in, func(hctx context.Context, m *amqpactor.Message) error {
			id := m.MessageID.(string)
			if strings.HasSuffix(id, "7") {
				return nil // a plain acknowledgement among the transactions
			}
			err := app.Transaction(hctx, func(tx *amqpactor.Tx) error {
				if err := tx.Publish(hctx, out, &amqpactor.Message{MessageID: "c-" + id, Body: []byte(id)}); err != nil {
					return err
				}
				return tx.Accept(m)
			})
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return err
		}, amqpactor.WithPartitions(8))
		require.NoError(t, err)
	})
	const n = 200
	for i := range n {
		require.NoError(t, pub.Publish(ctx, in, &amqpactor.Message{MessageID: fmt.Sprintf("m%03d", i), Body: []byte("m")}))
	}
	want := n - n/10
	require.Eventually(t, func() bool { return s.depth(out.Name()) == want }, waitFor, 10*time.Millisecond, "%d committed publishes", want)
	require.Eventually(t, func() bool {
		u := unacked(t, in.Name())
		return len(u) == 1 && u[0] == 0 && s.depth(in.Name()) == 0
	}, waitFor, 10*time.Millisecond, "every delivery acknowledged")
	require.NoError(t, app.Stop(ctx))
	require.Zero(t, s.depth(in.Name()), "deliveries back on the queue after the App stopped")
	got := outIDs(t, s, out.Name())
	require.Len(t, got, want)
	for id, c := range got {
		require.Equal(t, 1, c, "publishes of %s", id)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, errs)
}
