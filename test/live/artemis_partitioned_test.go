package live

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
	"github.com/amqpactor/amqpactor/test/kit/fleettest"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

func artemisURL(t *testing.T) string {
	t.Helper()
	return livetest.ArtemisURL(t, "the live Artemis App tests")
}

// artemisApp returns the maker of Apps named name on Artemis at u (the
// default dialect), each with a connection of its own.
func artemisApp(u string) func(name string) *amqpactor.App {
	return func(name string) *amqpactor.App {
		return amqpactor.New(amqpactor.Dial(u), amqpactor.WithName(name))
	}
}

// artemisMgmt runs f with the management client of a connection of its own.
func artemisMgmt(t *testing.T, u string, f func(ctx context.Context, m *amqpwire.ArtemisManagement)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := amqpwire.New(amqpwire.Config{URL: u, Dialect: amqpactor.Artemis}).Connect(ctx)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	var tc transport.Conn = conn
	f(ctx, tc.(*amqpwire.Conn).ArtemisManagement())
}

// artemisPartitioned is Partitioned(<prefix>.<unique>, n) on Artemis, whose
// partition queues and census queue are destroyed when the test ends.
func artemisPartitioned(t *testing.T, u, prefix string, n int) amqpactor.Address {
	addr := amqpactor.Partitioned(unique(prefix), n)
	t.Cleanup(func() {
		artemisMgmt(t, u, func(ctx context.Context, m *amqpwire.ArtemisManagement) {
			names := []string{protocol.CensusOf(addr).Name()}
			for i := range addr.Partitions() {
				names = append(names, addr.Partition(i).Name())
			}
			for _, q := range names {
				require.NoError(t, brokeradmin.DestroyArtemisQueue(ctx, m, q), "destroy %s", q)
			}
		})
	})
	return addr
}

// TestArtemisPartitionQueueExclusive: a partition queue an App consumes is
// exclusive on Artemis. A second receiver, of an independent client with
// credit, gets nothing while the App's receiver is attached, though every
// message is published while both are; once the App stops, it gets what
// follows.
func TestArtemisPartitionQueueExclusive(t *testing.T) {
	u := artemisURL(t)
	addr := artemisPartitioned(t, u, "artemis.excl", 1)
	app := artemisApp(u)(unique("artemis-excl-svc"))
	var handled atomic.Int64
	_, err := app.Subscribe(addr, func(context.Context, *amqpactor.Message) error {
		handled.Add(1)
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, app.Start(bound(t)))
	stopped := false
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		require.NoError(t, app.Stop(ctx))
		stopped = true
	}
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	artemisMgmt(t, u, func(ctx context.Context, m *amqpwire.ArtemisManagement) {
		excl, err := m.QueueExclusive(ctx, addr.Partition(0).Name())
		require.NoError(t, err)
		require.True(t, excl, "the partition queue is exclusive on the broker")
	})

	// The second receiver: go-amqp alone on a connection of its own.
	ctx := bound(t)
	other, err := amqp.Dial(ctx, u, nil)
	require.NoError(t, err)
	defer func() { _ = other.Close() }()
	sess, err := other.NewSession(ctx, nil)
	require.NoError(t, err)
	q := addr.Partition(0).Name()
	rcv, err := sess.NewReceiver(ctx, q, &amqp.ReceiverOptions{SourceCapabilities: []string{"queue"}, Credit: 100})
	require.NoError(t, err)
	var stolen atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := rcv.Receive(context.Background(), nil)
			if err != nil {
				return
			}
			_ = rcv.AcceptMessage(context.Background(), m)
			stolen.Add(1)
		}
	}()
	defer func() { _ = other.Close(); <-done }()

	for i := range 20 {
		require.NoError(t, app.Publish(ctx, addr, &amqpactor.Message{Body: []byte(strconv.Itoa(i)), GroupID: "g" + strconv.Itoa(i)}))
	}
	require.Eventually(t, func() bool { return handled.Load()+stolen.Load() == 20 }, 20*time.Second, 10*time.Millisecond,
		"the App handled %d and the second receiver got %d of 20", handled.Load(), stolen.Load())
	require.Zero(t, stolen.Load(), "the second receiver got messages while the App's receiver was attached")

	// Once the App's receiver is gone, the queue delivers to the next.
	stop()
	snd, err := sess.NewSender(ctx, q, &amqp.SenderOptions{TargetCapabilities: []string{"queue"}})
	require.NoError(t, err)
	for range 5 {
		require.NoError(t, snd.Send(ctx, amqp.NewMessage([]byte("after")), nil))
	}
	require.Eventually(t, func() bool { return stolen.Load() == 5 }, 20*time.Second, 10*time.Millisecond,
		"the second receiver got %d of 5 after the App stopped", stolen.Load())
	require.EqualValues(t, 20, handled.Load())
}

// TestArtemisPartitionQueueExclusiveOnPublish: a publish to a partition
// queue nothing consumes yet leaves the queue exclusive, though a sender's
// attach alone would have Artemis auto-create a plain one.
func TestArtemisPartitionQueueExclusiveOnPublish(t *testing.T) {
	u := artemisURL(t)
	addr := artemisPartitioned(t, u, "artemis.pub", 2)
	app := artemisApp(u)(unique("artemis-pub"))
	start(t, app)
	ctx := bound(t)
	for i := range 4 {
		require.NoError(t, app.Publish(ctx, addr, &amqpactor.Message{Body: []byte("x"), GroupID: "g" + strconv.Itoa(i)}))
	}
	artemisMgmt(t, u, func(ctx context.Context, m *amqpwire.ArtemisManagement) {
		for i := range addr.Partitions() {
			excl, err := m.QueueExclusive(ctx, addr.Partition(i).Name())
			require.NoError(t, err)
			require.True(t, excl, "partition %d is not exclusive", i)
		}
	})
}

// groupTracker checks what two replicas handle of ordered groups: a group
// in the hands of two at once (overlaps), a message handled before one
// published earlier in its group (inversions), and which replica handled
// each partition last.
type groupTracker struct {
	addr     amqpactor.Address
	inflight []atomic.Int32 // per group: handlers running, across the replicas
	overlaps atomic.Int64
	owner    []atomic.Int32 // per partition: 1 + the replica that handled it last

	mu         sync.Mutex
	seen       []map[int]bool
	maxSeq     []int
	handled    int
	dups, invs int
}

func newGroupTracker(addr amqpactor.Address, groups int) *groupTracker {
	g := &groupTracker{addr: addr, inflight: make([]atomic.Int32, groups), owner: make([]atomic.Int32, addr.Partitions()),
		seen: make([]map[int]bool, groups), maxSeq: make([]int, groups)}
	for i := range g.seen {
		g.seen[i], g.maxSeq[i] = map[int]bool{}, -1
	}
	return g
}

func (g *groupTracker) handler(replica int) amqpactor.Handler {
	return func(_ context.Context, m *amqpactor.Message) error {
		grp, err := strconv.Atoi(m.GroupID[1:])
		if err != nil {
			return amqpactor.Reject(err)
		}
		seq, err := strconv.Atoi(string(m.Body))
		if err != nil {
			return amqpactor.Reject(err)
		}
		if g.inflight[grp].Add(1) > 1 {
			g.overlaps.Add(1)
		}
		defer g.inflight[grp].Add(-1)
		// Long enough that two replicas holding one group would meet.
		time.Sleep(200 * time.Microsecond)
		g.owner[g.addr.PartitionFor(m.GroupID)].Store(int32(replica + 1))
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.seen[grp][seq] {
			g.dups++
			return nil
		}
		g.seen[grp][seq] = true
		g.handled++
		if seq < g.maxSeq[grp] {
			g.invs++
		}
		g.maxSeq[grp] = max(g.maxSeq[grp], seq)
		return nil
	}
}

// held counts the partitions each replica handled last.
func (g *groupTracker) held() [2]int {
	var n [2]int
	for i := range g.owner {
		if o := g.owner[i].Load(); o > 0 {
			n[o-1]++
		}
	}
	return n
}

func (g *groupTracker) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return fmt.Sprintf("handled %d, duplicates %d, inversions %d, overlaps %d, held %v",
		g.handled, g.dups, g.invs, g.overlaps.Load(), g.held())
}

// TestArtemisPartitionedReplicas: two replicas of one App (each its own
// connection) on Partitioned(NAME, 4) of Artemis, 40 groups published in
// order. The first replica starts alone and takes every partition; once
// the second starts, the partitions end up 2/2 between them, and no group
// is ever in the hands of both at once nor out of order, and nothing is
// lost.
func TestArtemisPartitionedReplicas(t *testing.T) {
	const groups = 40
	u := artemisURL(t)
	addr := artemisPartitioned(t, u, "artemis.orders", 4)
	name := unique("artemis-orders-svc")
	tr := newGroupTracker(addr, groups)
	replicas := make([]*amqpactor.App, 2)
	for i := range replicas {
		replicas[i] = artemisApp(u)(name)
		_, err := replicas[i].Subscribe(addr, tr.handler(i))
		require.NoError(t, err)
	}
	pub := artemisApp(u)(unique("artemis-orders-pub"))
	start(t, pub)
	start(t, replicas[0])

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var published atomic.Int64
	var pubErr atomic.Pointer[error]
	next := make([]int, groups) // per group, the next sequence number
	// publish sends each group's next msgs messages, the groups in
	// parallel, each in order (a publish waits for the broker's accept),
	// pausing between two of a group, until stop is closed.
	publish := func(msgs int, pause time.Duration, stop <-chan struct{}) {
		var wg sync.WaitGroup
		for grp := range groups {
			wg.Go(func() {
				for range msgs {
					select {
					case <-stop:
						return
					default:
					}
					m := &amqpactor.Message{Body: []byte(strconv.Itoa(next[grp])), GroupID: "g" + strconv.Itoa(grp)}
					if err := pub.Publish(ctx, addr, m); err != nil {
						pubErr.CompareAndSwap(nil, &err)
						return
					}
					next[grp]++
					published.Add(1)
					time.Sleep(pause)
				}
			})
		}
		wg.Wait()
	}
	allHandled := func(what string) {
		require.Eventually(t, func() bool {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return int64(tr.handled) == published.Load()
		}, 60*time.Second, 20*time.Millisecond, "%s: published %d, %v", what, published.Load(), tr)
	}

	// Alone, the first replica holds every partition.
	publish(10, 0, nil)
	require.Nil(t, pubErr.Load())
	allHandled("the first replica alone")
	require.Equal(t, [2]int{4, 0}, tr.held(), tr.String())

	// The second replica starts while the groups go on.
	start(t, replicas[1])
	stop := make(chan struct{})
	publishing := make(chan struct{})
	go func() {
		defer close(publishing)
		publish(2000, 10*time.Millisecond, stop)
	}()
	stopPublishing := sync.OnceFunc(func() { close(stop); <-publishing })
	t.Cleanup(stopPublishing) // before the replicas stop, should a check fail
	// balanced: the handlers' last owners are 2/2, and each replica's tree
	// shows the same two partitions held.
	balanced := func() bool {
		if tr.held() != [2]int{2, 2} {
			return false
		}
		for _, app := range replicas {
			h, err := fleettest.Held(ctx, app, addr)
			if err != nil || len(h) != 2 {
				return false
			}
		}
		return true
	}
	began := time.Now()
	require.Eventually(t, balanced, 30*time.Second, 100*time.Millisecond, "the partitions balanced 2/2: %v", tr)
	t.Logf("balanced 2/2 %v after the second replica started", time.Since(began).Round(100*time.Millisecond))
	// And they stay so.
	time.Sleep(2 * time.Second)
	require.True(t, balanced(), "still balanced: %v", tr)
	stopPublishing()
	if p := pubErr.Load(); p != nil && !errors.Is(*p, context.Canceled) {
		require.NoError(t, *p)
	}
	allHandled("both replicas")
	t.Log(tr)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	require.Zero(t, tr.overlaps.Load(), "groups in the hands of two replicas at once")
	require.Zero(t, tr.invs, "groups out of order")
	require.EqualValues(t, published.Load(), tr.handled, "lost")
}

// TestArtemisPartitionedFleet: TestPartitionedFleet on Artemis, three
// replicas on Partitioned(NAME, 8), the busiest stopped mid-stream and a
// fourth started: nothing lost, no group out of order, no partition queue
// handled by two replicas at once.
func TestArtemisPartitionedFleet(t *testing.T) {
	u := artemisURL(t)
	addr := artemisPartitioned(t, u, "artemis.fleet", 8)
	res := fleettest.Run(t, fleettest.Config{Addr: addr, AppName: unique("artemis-fleet-svc"), NewApp: artemisApp(u)})
	fleettest.RequireSound(t, res, 8000)
	require.Positive(t, res.Handovers, "the stopped replica held partitions: "+res.String())
}

// TestArtemisPartitionsBalancedAcrossReplicas:
// TestPartitionsBalancedAcrossReplicas on Artemis: three replicas share
// Partitioned(NAME, 12), 4 ± 1 each, 6 ± 1 after one stops, 4 ± 1 with a
// new one, each within 30 s; nothing lost, no group out of order, no
// partition handled by two replicas at once.
func TestArtemisPartitionsBalancedAcrossReplicas(t *testing.T) {
	u := artemisURL(t)
	addr := artemisPartitioned(t, u, "artemis.balance", 12)
	res := fleettest.RunBalance(t, fleettest.BalanceConfig{
		Config: fleettest.Config{Addr: addr, AppName: unique("artemis-balance-svc"), NewApp: artemisApp(u)},
	})
	fleettest.RequireSound(t, res, 30000)
}

// TestArtemisForeignCensusConsumersCannotChurnPartitions is
// TestForeignCensusConsumersCannotChurnPartitions on Artemis: 20 go-amqp
// receivers of a client that is no replica on the census queue; at most 10
// hand-overs in the 30 s after, nothing lost, no group out of order.
func TestArtemisForeignCensusConsumersCannotChurnPartitions(t *testing.T) {
	u := artemisURL(t)
	addr := artemisPartitioned(t, u, "artemis.census", 4)
	res := fleettest.RunForeignCensus(t, fleettest.CensusConfig{
		Config: fleettest.Config{Addr: addr, AppName: unique("artemis-census-svc"), NewApp: artemisApp(u)},
		Foreign: func(ctx context.Context, census amqpactor.Address) func() {
			conn, err := amqp.Dial(ctx, u, nil)
			require.NoError(t, err)
			sess, err := conn.NewSession(ctx, nil)
			require.NoError(t, err)
			for range 20 {
				_, err := sess.NewReceiver(ctx, census.Name(), &amqp.ReceiverOptions{Credit: 1, SourceCapabilities: []string{"queue"}})
				require.NoError(t, err)
			}
			return func() { require.NoError(t, conn.Close()) }
		},
	})
	fleettest.RequireSound(t, res, res.Published)
	require.Positive(t, res.Published)
	require.LessOrEqual(t, res.InWindow, 10, res.String())
}
