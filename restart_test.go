package amqpactor_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/inproc"
)

// find returns the first node of kind whose address mentions addr; a
// partition has no address: the first of that dispatcher's.
func find(n *amqpactor.Node, kind, addr string) *amqpactor.Node {
	if kind == "partition" {
		if d := find(n, "dispatcher", addr); d != nil && len(d.Children) > 0 {
			return d.Children[0]
		}
		return nil
	}
	if n.Kind == kind && strings.Contains(n.Address, addr) {
		return n
	}
	for _, c := range n.Children {
		if f := find(c, kind, addr); f != nil {
			return f
		}
	}
	return nil
}

// While 10,000 messages flow from publishers to a subscription of the same
// App on the in-process broker, the sender (several times), the
// subscription, the receiver, the dispatcher and a partition panic: every published message is handled
// (duplicates counted: a restarted receiver's link gives back what it had
// not settled), the tree shows the restarts, and Stop leaves no goroutine.
func TestRestartsMidStream(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	baseline := runtime.NumGoroutine()
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName("restarts"))
	const n = 10000
	var mu sync.Mutex
	handled := make(map[int]int, n)
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(_ context.Context, m *amqpactor.Message) error {
		id, _ := strconv.Atoi(string(m.Body))
		mu.Lock()
		handled[id]++
		mu.Unlock()
		return nil
	}, amqpactor.WithPartitions(2))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	stopped := false
	defer func() {
		if !stopped {
			_ = app.Stop(ctx)
		}
	}()

	crash := func(kind string) {
		tree, err := app.Tree(ctx)
		require.NoError(t, err)
		node := find(tree, kind, "orders")
		require.NotNil(t, node, "no %s node for orders", kind)
		sys.Root.Send(node.ActorPID(), &actors.Crash{Reason: "test"})
	}
	const publishers = 4
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for p := range publishers {
		wg.Go(func() {
			for i := p; i < n; i += publishers {
				if err := app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte(strconv.Itoa(i))}); err != nil {
					errs <- fmt.Errorf("publish %d: %w", i, err)
					return
				}
			}
		})
	}
	progress := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(handled)
	}
	// The subscription first: its restart replaces the receiver and the
	// dispatcher, whose nodes then start counting again.
	plan := []string{"sender", "subscription", "sender", "receiver", "sender", "dispatcher", "partition"}
	for i, kind := range plan {
		require.Eventually(t, func() bool { return progress() >= (i+1)*n/(len(plan)+2) }, 30*time.Second, time.Millisecond)
		crash(kind)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return progress() == n }, 30*time.Second, time.Millisecond, "every published message handled")

	mu.Lock()
	dups := 0
	for _, c := range handled {
		dups += c - 1
	}
	mu.Unlock()
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	restarts := map[string]int{}
	for _, kind := range []string{"sender", "subscription", "receiver", "dispatcher", "partition"} {
		node := find(tree, kind, "orders")
		require.NotNil(t, node, kind)
		restarts[kind] = node.Restarts
		require.NotZero(t, node.Counters["panics"], "the %s node shows its restart", kind)
	}
	t.Logf("published %d, lost %d, duplicates %d, restarts %v", n, n-progress(), dups, restarts)
	require.Equal(t, 3, int(find(tree, "sender", "orders").Counters["panics"]))
	stopped = true
	require.NoError(t, app.Stop(ctx))
	// goleak (deferred above) checks that none is left but the actor
	// system's dead-letter throttle, started on the first dead letter.
	t.Logf("goroutines: %d before Start, %d after Stop", baseline, runtime.NumGoroutine())
}
