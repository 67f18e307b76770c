package amqpactor_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// TestHandlersKeepTheirMessages: the in-process broker reuses a delivery's
// memory once it is settled, so the Message a handler got must own its Body:
// a handler that keeps its messages (and scribbles on them) finds each as it
// was published after thousands more went through the same memory, and the
// publisher may reuse its buffer as soon as Publish returns.
func TestHandlersKeepTheirMessages(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	const n = 2000
	app := amqpactor.New(inproc.New())
	var mu sync.Mutex
	var kept []*amqpactor.Message
	_, err := app.Subscribe(amqpactor.Queue("keep-them"), func(_ context.Context, m *amqpactor.Message) error {
		mu.Lock()
		kept = append(kept, m)
		mu.Unlock()
		return nil
	}, amqpactor.WithCredit(16))
	require.NoError(t, err)
	_, err = app.Subscribe(amqpactor.Queue("scribble"), func(_ context.Context, m *amqpactor.Message) error {
		for i := range m.Body {
			m.Body[i] = '!'
		}
		return nil
	}, amqpactor.WithCredit(16))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	body := make([]byte, 0, 64)
	for i := range n {
		body = fmt.Appendf(body[:0], "message %04d", i)
		require.NoError(t, app.Publish(ctx, amqpactor.Queue("keep-them"), &amqpactor.Message{Body: body}))
		require.NoError(t, app.Publish(ctx, amqpactor.Queue("scribble"), &amqpactor.Message{Body: body}))
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(kept) == n
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, app.Stop(ctx))
	seen := make(map[string]bool, n)
	for _, m := range kept {
		seen[string(m.Body)] = true
	}
	for i := range n {
		require.True(t, seen[fmt.Sprintf("message %04d", i)], "message %04d changed or lost", i)
	}
}
