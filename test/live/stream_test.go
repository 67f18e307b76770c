package live

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
	"github.com/amqpactor/amqpactor/test/kit/testproxy"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// TestStreamResumeAfterProxyCut: a subscription reading 10,000 messages of
// a stream from the first, through a proxy that cuts its connection while
// a handler holds a delivery a third of the way in, loses none and handles
// again at most what was in flight (its credit): the new link starts at the
// oldest offset it had not settled.
func TestStreamResumeAfterProxyCut(t *testing.T) {
	raw := brokerURL(t)
	u, err := url.Parse(raw)
	require.NoError(t, err)
	px := testproxy.New(t, u.Host)
	u.Host = px.Addr()
	const n, credit = 10000, 64
	name := unique("streamcut")
	st := amqpactor.Stream(name)
	t.Cleanup(func() {
		mgmt(t, raw, func(ctx context.Context, m *amqpwire.Management) {
			require.NoError(t, brokeradmin.DeleteQueue(ctx, m, name))
		})
	})

	pub := newApp(t, raw, nil)
	start(t, pub)
	for i := range n {
		require.NoError(t, pub.Publish(bound(t), st, &amqpactor.Message{MessageID: fmt.Sprint(i), Body: []byte("x")}))
	}

	var mu sync.Mutex
	seen := make(map[string]int, n)
	total := 0
	held, hold := make(chan struct{}), make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(hold) }) })
	app := newApp(t, u.String(), nil)
	_, err = app.Subscribe(st, func(ctx context.Context, m *amqpactor.Message) error {
		mu.Lock()
		seen[fmt.Sprint(m.MessageID)]++
		total++
		third := total == n/3
		mu.Unlock()
		if third {
			close(held)
			<-hold
		}
		return nil
	}, amqpactor.WithStreamOffset(amqpactor.StreamFirst()), amqpactor.WithCredit(credit))
	require.NoError(t, err)
	start(t, app)
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("a third of the stream not read in a minute")
	}
	require.Positive(t, px.Cut(), "connections cut")
	time.Sleep(50 * time.Millisecond)
	once.Do(func() { close(hold) })
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == n
	}, 2*time.Minute, 20*time.Millisecond, "every message read after the cut")
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.LessOrEqual(t, total-n, credit, "handled again: at most what was in flight")
	t.Logf("%d messages, %d handled again after the cut", n, total-n)
}
