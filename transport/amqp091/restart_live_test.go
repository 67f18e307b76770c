package amqp091_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// TestLiveReceiverRestartGivesBack: a receiver actor that panics while a
// handler holds a delivery is restarted on the same session (channel) with
// a new consumer; the delivery it held goes back to the queue (a cancelled
// consumer's unacknowledged messages would otherwise stay with the channel
// for as long as it lives) and is handled again, marked redelivered.
func TestLiveReceiverRestartGivesBack(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 receiver restart test")
	q := amqpactor.Queue(unique("amqp091-restart"))
	newSide(t, url).deleteQueue(q.Name())
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	t.Cleanup(sys.Shutdown)
	app := amqpactor.New(amqpactor.Dial091(url), amqpactor.WithActorSystem(sys), amqpactor.WithName(unique("restart")),
		amqpactor.WithBackoff(5*time.Millisecond, 100*time.Millisecond))
	var mu sync.Mutex
	var firsts []bool
	holding := make(chan struct{}, 1)
	_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		mu.Lock()
		firsts = append(firsts, m.FirstAcquirer)
		n := len(firsts)
		mu.Unlock()
		if n == 1 {
			holding <- struct{}{}
			<-ctx.Done() // held until its link ends
			return ctx.Err()
		}
		return nil
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		require.NoError(t, app.Stop(ctx))
	})
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{MessageID: "held", Body: []byte("x")}))
	select {
	case <-holding:
	case <-ctx.Done():
		t.Fatal("the delivery never reached its handler")
	}
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	var receiver *amqpactor.Node
	var walk func(n *amqpactor.Node)
	walk = func(n *amqpactor.Node) {
		if n.Kind == "receiver" {
			receiver = n
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(tree)
	require.NotNil(t, receiver)
	sys.Root.Send(receiver.ActorPID(), &testhook.Crash{Reason: "test"})
	if !assert.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(firsts) >= 2 }, waitFor, 5*time.Millisecond,
		"the held delivery handled again after the receiver's restart") {
		tree, _ := app.Tree(context.Background())
		js, _ := json.MarshalIndent(tree, "", " ")
		t.Fatalf("the tree: %s", js)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []bool{true, false}, firsts[:2], "first acquirer, then redelivered")
}
