package amqpactor_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/internal/testhook"
)

// Partitions that their supervisor stops for good mid-stream (here at their
// first failure) are started again by their dispatcher: every message is
// handled exactly once and each group in order, all the credit comes back
// (the receiver holds nothing unsettled), Health stays nil and the tree
// draws only live partitions, under a dispatcher that says why it replaced
// them.
func TestPartitionsStoppedMidStreamAreReplaced(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	const n, groups, crashes = 4000, 8, 6
	sys := sharedSystem(t)
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName("partition-gone"),
		amqpactor.WithSupervisorStrategy(actor.NewOneForOneStrategy(0, time.Minute, actor.DefaultDecider)))
	var mu sync.Mutex
	seen := map[string][]int{}
	var handled atomic.Int64
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(_ context.Context, m *amqpactor.Message) error {
		id, _ := strconv.Atoi(string(m.Body))
		mu.Lock()
		seen[m.GroupID] = append(seen[m.GroupID], id)
		mu.Unlock()
		handled.Add(1)
		return nil
	}, amqpactor.WithPartitions(2), amqpactor.WithCredit(16))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { _ = app.Stop(context.Background()) }()

	dispatcherNode := func() *amqpactor.Node {
		tree, err := app.Tree(ctx)
		require.NoError(t, err)
		d := find(tree, "dispatcher", "orders")
		require.NotNil(t, d)
		return d
	}
	published := make(chan error, 1)
	go func() {
		for i := range n {
			m := &amqpactor.Message{GroupID: "g" + strconv.Itoa(i%groups), Body: []byte(strconv.Itoa(i))}
			if err := app.Publish(ctx, amqpactor.Queue("orders"), m); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	for c := range crashes {
		require.Eventually(t, func() bool { return handled.Load() >= int64((c+1)*n/(crashes+2)) }, 10*time.Second, time.Millisecond)
		d := dispatcherNode()
		require.Len(t, d.Children, 2)
		sys.Root.Send(d.Children[c%2].ActorPID(), &testhook.Crash{Reason: "test"})
		require.Eventually(t, func() bool { return dispatcherNode().Counters["replaced"] == uint64(c+1) }, 10*time.Second,
			time.Millisecond, "crash %d: the partition was not started again", c+1)
	}
	require.NoError(t, <-published)
	require.Eventually(t, func() bool { return handled.Load() >= n }, 10*time.Second, time.Millisecond,
		"handled %d of %d", handled.Load(), n)

	mu.Lock()
	for g, ids := range seen {
		for i := 1; i < len(ids); i++ {
			require.Less(t, ids[i-1], ids[i], "group %s out of order", g)
		}
	}
	total := 0
	for _, ids := range seen {
		total += len(ids)
	}
	lost, dups := max(n-total, 0), max(total-n, 0)
	mu.Unlock()
	require.Zero(t, lost)
	require.Zero(t, dups)

	require.Eventually(t, func() bool {
		tree, err := app.Tree(ctx)
		require.NoError(t, err)
		r := find(tree, "receiver", "orders")
		return r != nil && r.Counters["unsettled"] == 0
	}, 10*time.Second, time.Millisecond, "the receiver holds deliveries nobody will settle")
	require.NoError(t, app.Health())
	d := dispatcherNode()
	require.Equal(t, "attached", d.State)
	require.Contains(t, d.LastError, "partition-")
	for _, p := range d.Children {
		_, alive := sys.ProcessRegistry.GetLocal(p.ActorPID().Id)
		require.True(t, alive, "the tree draws a dead partition %s", p.PID)
		require.Equal(t, "attached", p.State)
	}
	t.Logf("published %d, lost %d, duplicates %d, partitions replaced %d, dispatcher %s: %s",
		n, lost, dups, d.Counters["replaced"], d.State, d.LastError)
}
