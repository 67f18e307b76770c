package live

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
	"github.com/amqpactor/amqpactor/test/kit/fleettest"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// TestPartitionedFleet: on RabbitMQ 4, Partitioned("orders-<unique>", 8)
// with three replicas, 16 groups × 500 messages, the busiest replica
// stopped mid-stream and a fourth started: nothing lost, no group out of
// order, no partition queue handled by two replicas at once. The partition
// queues are declared with x-single-active-consumer and deleted at the end.
func TestPartitionedFleet(t *testing.T) {
	u := brokerURL(t)
	addr := partitioned(t, u, "orders", 8, true)
	res := fleettest.Run(t, fleettest.Config{Addr: addr, AppName: unique("orders-svc"), NewApp: rabbitApp(u)})
	fleettest.RequireSound(t, res, 8000)
	require.Positive(t, res.Handovers, "the stopped replica held partitions: "+res.String())

	mgmt(t, u, func(ctx context.Context, m *amqpwire.Management) {
		for i := range addr.Partitions() {
			info, err := m.QueueInfo(ctx, addr.Partition(i).Name())
			require.NoError(t, err)
			require.Equal(t, amqpwire.Quorum, info.Type)
			require.Equal(t, true, info.Arguments["x-single-active-consumer"], "queue %s", info.Name)
			require.Zero(t, info.Messages, "queue %s", info.Name)
		}
	})
}

// partitioned is Partitioned(<prefix>.<unique>, n), whose partition queues
// and census queue are deleted when the test ends; with must a delete that
// fails fails the test.
func partitioned(t *testing.T, u, prefix string, n int, must bool) amqpactor.Address {
	addr := amqpactor.Partitioned(unique(prefix), n)
	t.Cleanup(func() {
		mgmt(t, u, func(ctx context.Context, m *amqpwire.Management) {
			var names []string
			for i := range addr.Partitions() {
				names = append(names, addr.Partition(i).Name())
			}
			names = append(names, protocol.CensusOf(addr).Name())
			for _, q := range names {
				if err := brokeradmin.DeleteQueue(ctx, m, q); must {
					require.NoError(t, err, "delete %s", q)
				}
			}
		})
	})
	return addr
}

// rabbitApp returns the maker of Apps named name on RabbitMQ 4 at u.
func rabbitApp(u string) func(name string) *amqpactor.App {
	return func(name string) *amqpactor.App {
		return amqpactor.New(amqpactor.Dial(u, amqpactor.WithDialect(amqpactor.RabbitMQ4)), amqpactor.WithName(name))
	}
}

// TestPartitionActiveOrStandby: two replicas of one App subscribe to
// Partitioned(NAME, 4). RabbitMQ 4.3 tells each receiver of a
// single-active-consumer queue whether it is the active one
// (rabbitmq:active): the tree shows each partition active on one replica
// (counter active=1) and standby on the other (state standby, active=0).
// RabbitMQ 4.0 says nothing: no receiver shows an active counter there.
func TestPartitionActiveOrStandby(t *testing.T) {
	u := brokerURL(t)
	v := livetest.RabbitMQ(t, u)
	addr := partitioned(t, u, "standby", 4, false)
	name := unique("standby-svc")
	var apps []*amqpactor.App
	for range 2 {
		app := rabbitApp(u)(name)
		_, err := app.Subscribe(addr, func(context.Context, *amqpactor.Message) error { return nil })
		require.NoError(t, err)
		start(t, app)
		apps = append(apps, app)
	}
	// receiversOf returns each partition's receiver node in app's tree.
	receiversOf := func(app *amqpactor.App) map[string]*amqpactor.Node {
		out := map[string]*amqpactor.Node{}
		tree, err := app.Tree(bound(t))
		require.NoError(t, err)
		var walk func(n *amqpactor.Node)
		walk = func(n *amqpactor.Node) {
			if n.Kind == "receiver" && strings.Contains(n.Address, addr.Name()+".p") {
				out[strings.Fields(n.Address)[0]] = n
			}
			for _, c := range n.Children {
				walk(c)
			}
		}
		walk(tree)
		return out
	}
	receivers := func() [2]map[string]*amqpactor.Node {
		return [2]map[string]*amqpactor.Node{receiversOf(apps[0]), receiversOf(apps[1])}
	}
	if !v.AtLeast(4, 3) {
		rs := receivers()
		for i := range rs {
			require.Len(t, rs[i], 4)
			for p, n := range rs[i] {
				_, has := n.Counters["active"]
				require.False(t, has, "RabbitMQ %v says nothing of activity, yet %s shows %v", v, p, n.Counters)
			}
		}
		return
	}
	require.Eventually(t, func() bool {
		rs := receivers()
		if len(rs[0]) != 4 || len(rs[1]) != 4 {
			return false
		}
		for p := range rs[0] {
			a, b := rs[0][p], rs[1][p]
			if a == nil || b == nil {
				return false
			}
			aa, okA := a.Counters["active"]
			ba, okB := b.Counters["active"]
			if !okA || !okB || aa+ba != 1 {
				return false
			}
			standby := a
			if aa == 1 {
				standby = b
			}
			if standby.State != "standby" {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "each partition active on one replica and standby on the other (RabbitMQ %v)", v)
	for p, n := range receiversOf(apps[1]) {
		t.Logf("replica 2, %s: %s %v", p, n.State, n.Counters["active"])
	}
	// The other replica takes over when the first stops: a StateChange
	// marks each switch from standby to attached.
	var mu sync.Mutex
	switched := map[string]bool{}
	stop := apps[1].WatchStateChanges(func(sc amqpactor.StateChange) {
		if sc.Kind == "receiver" && sc.From == "standby" && sc.To == "attached" {
			mu.Lock()
			switched[sc.Path] = true
			mu.Unlock()
		}
	})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, apps[0].Stop(ctx))
	require.Eventually(t, func() bool {
		for _, n := range receiversOf(apps[1]) {
			if n.Counters["active"] != 1 || n.State != "attached" {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "the second replica holds every partition")
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, switched, "a StateChange from standby to attached")
}
