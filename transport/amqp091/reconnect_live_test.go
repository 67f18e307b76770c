package amqp091_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// closeConnection has the broker close the connection named name (its
// container id), and only that one.
func closeConnection(t *testing.T, name string) {
	t.Helper()
	// The container id goes in client_properties as connection_name.
	for _, l := range ctl(t, "list_connections", "pid", "client_properties") {
		f := strings.Fields(l)
		if len(f) >= 2 && strings.Contains(l, `"`+name+`"`) {
			ctl(t, "close_connection", f[0], "closed by the amqp091 reconnect test")
			return
		}
	}
	t.Fatalf("no connection named %s on the broker", name)
}

// TestLiveBrokerClosesConnection: when the broker closes the connection,
// the connection actor opens a new one with backoff; the subscription goes
// on and publishes made meanwhile arrive, every one.
func TestLiveBrokerClosesConnection(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 reconnect test")
	q := amqpactor.Queue(unique("amqp091-reconnect"))
	newSide(t, url).deleteQueue(q.Name())
	name := unique("amqp091-reconnect")
	var mu sync.Mutex
	got := map[string]int{}
	app := startApp(t, url, func(app *amqpactor.App) {
		_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
			mu.Lock()
			got[fmt.Sprint(m.MessageID)]++
			mu.Unlock()
			return nil
		})
		require.NoError(t, err)
	}, amqpactor.WithContainerID(name))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{MessageID: "before", Body: []byte("x")}))
	require.Eventually(t, func() bool { return count() == 1 }, waitFor, 5*time.Millisecond)

	closeConnection(t, name)
	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = app.Publish(ctx, q, &amqpactor.Message{MessageID: fmt.Sprint("after-", i), Body: []byte("y")})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "publish %d across the reconnect", i)
	}
	require.Eventually(t, func() bool { return count() == n+1 }, waitFor, 5*time.Millisecond, "every message handled after the reconnect")
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	require.Positive(t, tree.Restarts, "the connection was opened again: %+v", tree)
	t.Logf("connection node after the broker closed it: restarts %d, last error %q", tree.Restarts, tree.LastError)
	mu.Lock()
	defer mu.Unlock()
	for id, k := range got {
		require.Equal(t, 1, k, "calls for %s", id)
	}
}

// TestLiveQueueDeleted: a queue deleted under its subscription (the broker
// cancels the consumer) is declared again by the re-attaching receiver, and
// the subscription goes on.
func TestLiveQueueDeleted(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 queue deletion test")
	q := amqpactor.Queue(unique("amqp091-deleted"))
	s := newSide(t, url)
	s.deleteQueue(q.Name())
	var mu sync.Mutex
	got := map[string]int{}
	app := startApp(t, url, func(app *amqpactor.App) {
		_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
			mu.Lock()
			got[fmt.Sprint(m.MessageID)]++
			mu.Unlock()
			return nil
		})
		require.NoError(t, err)
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	seen := func(id string) bool { mu.Lock(); defer mu.Unlock(); return got[id] > 0 }
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{MessageID: "before", Body: []byte("x")}))
	require.Eventually(t, func() bool { return seen("before") }, waitFor, 5*time.Millisecond)

	require.NoError(t, s.do(func(ch *rmqChannel) error { _, err := ch.QueueDelete(q.Name(), false, false, false); return err }))
	// Until the receiver has declared the queue again a publish has no
	// queue to go to: it fails (unroutable) and is tried again.
	i := 0
	require.Eventually(t, func() bool {
		i++
		id := fmt.Sprint("after-", i)
		if err := app.Publish(ctx, q, &amqpactor.Message{MessageID: id, Body: []byte("y")}); err != nil {
			return false
		}
		return true
	}, waitFor, 20*time.Millisecond, "a publish after the queue is back")
	require.Eventually(t, func() bool { return seen(fmt.Sprint("after-", i)) }, waitFor, 5*time.Millisecond,
		"the subscription receives from the queue declared again")
}

// TestLiveBrokerClosesPublisherChannel: a publish to a raw exchange that
// was deleted after its sender attached makes the broker close the
// publisher's channel (404). The publish fails; the publisher opens a new
// channel, so a publish to a queue through it goes on, and the raw
// address works again once its exchange is back.
func TestLiveBrokerClosesPublisherChannel(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 channel close test")
	s := newSide(t, url)
	ex := unique("amqp091-ex")
	q, other := amqpactor.Queue(unique("amqp091-exq")), amqpactor.Queue(unique("amqp091-other"))
	s.deleteQueue(q.Name())
	s.deleteQueue(other.Name())
	t.Cleanup(func() { _ = s.do(func(ch *rmqChannel) error { return ch.ExchangeDelete(ex, false, false) }) })
	bindExchange := func() error {
		return s.do(func(ch *rmqChannel) error {
			if err := ch.ExchangeDeclare(ex, "direct", false, true, false, false, nil); err != nil {
				return err
			}
			return ch.QueueBind(q.Name(), "k", ex, false, nil)
		})
	}
	var mu sync.Mutex
	got := map[string]int{}
	seen := func(id string) bool { mu.Lock(); defer mu.Unlock(); return got[id] > 0 }
	h := func(ctx context.Context, m *amqpactor.Message) error {
		mu.Lock()
		got[fmt.Sprint(m.MessageID)]++
		mu.Unlock()
		return nil
	}
	app := startApp(t, url, func(app *amqpactor.App) {
		_, err := app.Subscribe(q, h)
		require.NoError(t, err)
		_, err = app.Subscribe(other, h)
		require.NoError(t, err)
	})
	require.NoError(t, bindExchange())
	raw := amqpactor.Raw(ex + "/k")
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, app.Publish(ctx, raw, &amqpactor.Message{MessageID: "raw-1", Body: []byte("r")}))
	require.NoError(t, app.Publish(ctx, other, &amqpactor.Message{MessageID: "other-1", Body: []byte("o")}))
	require.Eventually(t, func() bool { return seen("raw-1") && seen("other-1") }, waitFor, 5*time.Millisecond)

	require.NoError(t, s.do(func(ch *rmqChannel) error { return ch.ExchangeDelete(ex, false, false) }))
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	err := app.Publish(short, raw, &amqpactor.Message{MessageID: "raw-lost", Body: []byte("r")})
	cancelShort()
	require.Error(t, err, "a publish to a deleted exchange")
	t.Logf("publish to the deleted exchange: %v", err)
	require.NoError(t, app.Publish(ctx, other, &amqpactor.Message{MessageID: "other-2", Body: []byte("o")}),
		"a publish to a queue after the broker closed the publisher's channel")
	require.Eventually(t, func() bool { return seen("other-2") }, waitFor, 5*time.Millisecond)

	require.NoError(t, bindExchange())
	require.Eventually(t, func() bool {
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return app.Publish(c, raw, &amqpactor.Message{MessageID: "raw-2", Body: []byte("r")}) == nil
	}, waitFor, 50*time.Millisecond, "the raw address once its exchange is back")
	require.Eventually(t, func() bool { return seen("raw-2") }, waitFor, 5*time.Millisecond)
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	for _, n := range tree.Children {
		if n.Kind == "publisher" && n.Name == "publisher" {
			t.Logf("publisher: restarts %d, last error %q", n.Restarts, n.LastError)
		}
	}
}
