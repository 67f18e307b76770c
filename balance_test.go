package amqpactor_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/test/kit/fleettest"
)

// Three replicas share Partitioned("orders", 12) on the in-process broker:
// 30,000 messages over 300 groups; each replica comes to hold 4 ± 1
// partitions, the two left after one stops 6 ± 1, and with a new one
// started 4 ± 1 again; nothing lost, no group out of order, no partition
// handled by two replicas at once.
func TestPartitionsBalancedAcrossReplicasInProcess(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	b := inproc.New()
	addr := amqpactor.Partitioned("orders-balanced", 12)
	res := fleettest.RunBalance(t, fleettest.BalanceConfig{
		Config: fleettest.Config{
			Addr:    addr,
			AppName: "orders-svc",
			NewApp:  func(name string) *amqpactor.App { return amqpactor.New(b, amqpactor.WithName(name)) },
		},
		Diagnose: func() string {
			var s []string
			for i := range addr.Partitions() {
				q := addr.Partition(i).Name()
				s = append(s, fmt.Sprintf("%s: %d waiting, %d unsettled", q, b.QueueDepth(q), b.Unsettled(q)))
			}
			return strings.Join(s, "; ")
		},
	})
	fleettest.RequireSound(t, res, 30000)
}

// receiverOf is the receiver node of partition queue pq in app's tree.
func receiverOf(t *testing.T, ctx context.Context, app *amqpactor.App, pq amqpactor.Address) *amqpactor.Node {
	t.Helper()
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	var found *amqpactor.Node
	var walk func(n *amqpactor.Node)
	walk = func(n *amqpactor.Node) {
		if n.Kind == "receiver" && strings.HasPrefix(n.Address, pq.String()+" ") {
			found = n
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(tree)
	return found
}

// A replica hands a partition over only once what it took is settled: the
// first replica holds both partitions of Partitioned(NAME, 2), its handler
// of p1 is held; a second replica starts, so the first has one too many
// and hands p1 over: it takes nothing more from p1 (handing-over), but p1
// stays with it, the second standing by, until the held handler returns;
// then the second handles p1's next message, after the first's last.
func TestPartitionHandedOverOnlyOnceSettled(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	b := inproc.New()
	addr := amqpactor.Partitioned("handover", 2)
	p1 := addr.Partition(1)
	group := ""
	for i := 0; group == ""; i++ {
		if g := "g" + strconv.Itoa(i); addr.PartitionFor(g) == 1 {
			group = g
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var order atomic.Int64 // events in order: enters and exits of handlers of p1
	var firstExit, secondEnter atomic.Int64
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	first := amqpactor.New(b, amqpactor.WithName("svc"))
	_, err := first.Subscribe(addr, func(hctx context.Context, m *amqpactor.Message) error {
		if string(m.Body) == "held" {
			close(entered)
			<-release
			firstExit.Store(order.Add(1))
		}
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, first.Start(ctx))
	defer func() { require.NoError(t, first.Stop(ctx)) }()
	defer letGo() // before the Stops, had the test failed with the handler held
	pub := amqpactor.New(b)
	require.NoError(t, pub.Start(ctx))
	defer func() { require.NoError(t, pub.Stop(ctx)) }()
	require.NoError(t, pub.Publish(ctx, addr, &amqpactor.Message{GroupID: group, Body: []byte("held")}))
	<-entered

	second := amqpactor.New(b, amqpactor.WithName("svc"))
	got := make(chan string, 1)
	_, err = second.Subscribe(addr, func(hctx context.Context, m *amqpactor.Message) error {
		if string(m.Body) == "next" {
			secondEnter.Store(order.Add(1))
			got <- string(m.Body)
		}
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, second.Start(ctx))
	defer func() { require.NoError(t, second.Stop(ctx)) }()

	require.Eventually(t, func() bool {
		n := receiverOf(t, ctx, first, p1)
		return n != nil && n.State == "handing-over"
	}, 20*time.Second, 10*time.Millisecond, "the first replica hands p1 over")
	// Sent now, it is not the first's to take any more: the second gets it
	// once the first has let go of p1.
	require.NoError(t, pub.Publish(ctx, addr, &amqpactor.Message{GroupID: group, Body: []byte("next")}))
	// Still the first's: the held handler has not returned.
	n := receiverOf(t, ctx, second, p1)
	require.NotNil(t, n)
	require.Equal(t, "standby", n.State)
	require.Equal(t, uint64(0), n.Counters["delivered"])

	letGo()
	select {
	case <-got:
	case <-ctx.Done():
		t.Fatal("the second replica never handled p1's next message")
	}
	require.Less(t, firstExit.Load(), secondEnter.Load(), "the second handled p1 before the first's handler returned")
	require.Eventually(t, func() bool {
		n := receiverOf(t, ctx, second, p1)
		return n != nil && n.Counters["active"] == 1
	}, 10*time.Second, 10*time.Millisecond)
}
