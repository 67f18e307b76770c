package fleettest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// BalanceConfig is one run of the balancing scenario: Replicas Apps of one
// name share a Partitioned address while one publisher sends Groups ordered
// groups of PerGroup messages; once the partitions are balanced one replica
// is stopped, once they are balanced again one more is started.
type BalanceConfig struct {
	// Config is the run's addresses and Apps; its zero Groups, PerGroup
	// and Bound mean 300, 100 and 3 minutes here.
	Config
	// Converge bounds each wait for the partitions to be balanced; 30 s
	// when zero.
	Converge time.Duration
	// Diagnose, when set, describes the broker's side when not everything
	// published is handled.
	Diagnose func() string
}

// BalanceResult is what a balancing run measured.
type BalanceResult struct {
	Counts
	// Held is how many partitions each running replica held once balanced:
	// with Replicas, after one stopped, after one more started.
	Held [3][]int
	// Converged is how long each of those took to reach: from the last
	// replica's start, from the stop, from the new replica's start.
	Converged [3]time.Duration
	Elapsed   time.Duration
}

func (r BalanceResult) String() string {
	return fmt.Sprintf("published %d, handled %d, lost %d, duplicates %d, inversions %d, overlaps %d, hand-overs %d, held %v in %v, %v",
		r.Published, r.Handled, r.Lost, r.Duplicates, r.Inversions, r.Overlaps, r.Handovers, r.Held,
		[]time.Duration{r.Converged[0].Round(time.Millisecond), r.Converged[1].Round(time.Millisecond), r.Converged[2].Round(time.Millisecond)},
		r.Elapsed.Round(time.Millisecond))
}

// Held returns, for each partition of addr that app's tree shows active
// (the receiver's counter active=1: the broker holds this replica as the
// queue's single active consumer), its index.
func Held(ctx context.Context, app *amqpactor.App, addr amqpactor.Address) ([]int, error) {
	tree, err := app.Tree(ctx)
	if err != nil {
		return nil, err
	}
	names := map[string]int{}
	for i := range addr.Partitions() {
		names[addr.Partition(i).String()] = i
	}
	var held []int
	var walk func(n *amqpactor.Node)
	walk = func(n *amqpactor.Node) {
		if n.Kind == "receiver" && n.Counters["active"] == 1 {
			if f := strings.Fields(n.Address); len(f) > 0 {
				if i, ok := names[f[0]]; ok {
					held = append(held, i)
				}
			}
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(tree)
	return held, nil
}

// RunBalance runs the balancing scenario. It asserts on t only what it
// needs to go on (Start, Publish, each wait for balance within Converge);
// the caller asserts on the result.
func RunBalance(t *testing.T, c BalanceConfig) BalanceResult {
	t.Helper()
	c.Config = c.orDefaults(300, 100, 3*time.Minute)
	if c.Converge == 0 {
		c.Converge = 30 * time.Second
	}
	ctx, cancel, tl := c.begin(t)
	defer cancel()
	n := c.Addr.Partitions()
	total := c.Groups * c.PerGroup

	var mu sync.Mutex
	running := map[int]*amqpactor.App{} // replica id → App
	startReplica := func(id int) {
		app := c.NewApp(c.AppName)
		_, err := app.Subscribe(c.Addr, tl.handler(id, nil, nil))
		require.NoError(t, err)
		require.NoError(t, app.Start(ctx))
		mu.Lock()
		running[id] = app
		mu.Unlock()
	}
	stopAll := func() {
		mu.Lock()
		defer mu.Unlock()
		for id, a := range running {
			require.NoError(t, stopWithin(context.Background(), a, 15*time.Second), "replica %d", id)
			delete(running, id)
		}
	}
	t.Cleanup(stopAll)

	pub := c.publisher(ctx, t)

	var res BalanceResult
	// balanced polls every replica's tree: each running replica holds lo
	// to hi partitions and each partition is held once. The trees are
	// read one after the other, so a hand-over between two reads can show
	// a partition on two replicas without it having been so: that no two
	// handled one at once is the handlers' busy marks' to show (Overlaps).
	balanced := func(lo, hi int) ([]int, bool) {
		mu.Lock()
		defer mu.Unlock()
		owners := make([]int, n)
		var held []int
		ok := true
		for id := range c.Replicas + 1 {
			app := running[id]
			if app == nil {
				continue
			}
			h, err := Held(ctx, app, c.Addr)
			if err != nil {
				return nil, false
			}
			for _, p := range h {
				owners[p]++
			}
			held = append(held, len(h))
			if len(h) < lo || len(h) > hi {
				ok = false
			}
		}
		for _, o := range owners {
			if o != 1 {
				ok = false
			}
		}
		return held, ok
	}
	await := func(phase, lo, hi int, since time.Time) {
		var last []int
		ok := assert.Eventually(t, func() bool {
			held, ok := balanced(lo, hi)
			last = held
			if ok {
				res.Held[phase] = held
			}
			return ok
		}, c.Converge, 20*time.Millisecond, "phase %d: each replica holding %d to %d partitions (%s)", phase, lo, hi, res)
		require.True(t, ok, "phase %d: the replicas hold %v partitions", phase, last)
		res.Converged[phase] = time.Since(since)
	}

	begin := time.Now()
	for id := range c.Replicas {
		startReplica(id)
	}
	since := time.Now()
	// Only now: a queue the in-process broker does not have yet drops
	// what is sent to it. The publisher sends rounds, one message of every group each; the
	// round at each third waits for the next phase, so that the stop and
	// the start are mid-stream. The ticker paces the stream over the
	// phases; nothing waits on it.
	gates := []chan struct{}{make(chan struct{}), make(chan struct{})}
	var published atomic.Int64
	pubErr := make(chan error, 1)
	go func() {
		pace := time.NewTicker(10 * time.Millisecond)
		defer pace.Stop()
		for seq := range c.PerGroup {
			if gi := seq * 3 / c.PerGroup; seq > 0 && gi != (seq-1)*3/c.PerGroup && gi <= len(gates) {
				select {
				case <-gates[gi-1]:
				case <-ctx.Done():
					pubErr <- ctx.Err()
					return
				}
			}
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for w := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for g := w; g < c.Groups; g += 16 {
						if err := c.publish(ctx, pub, g, seq); err != nil {
							errs <- err
							return
						}
						published.Add(1)
					}
				}()
			}
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				pubErr <- err
				return
			}
			select {
			case <-pace.C:
			case <-ctx.Done():
			}
		}
		pubErr <- nil
	}()

	// The bounds: 4 ± 1 of 12 each with three replicas, 6 ± 1 with
	// two, and 3 ± 1 once a fourth has started (three live: at most 4 each).
	share := n / c.Replicas
	await(0, share-1, share+1, since)

	// Stop the replica that holds the most.
	victim, most := 0, -1
	mu.Lock()
	for id, app := range running {
		h, err := Held(ctx, app, c.Addr)
		require.NoError(t, err)
		if len(h) > most {
			victim, most = id, len(h)
		}
	}
	app := running[victim]
	delete(running, victim)
	mu.Unlock()
	since = time.Now()
	require.NoError(t, stopWithin(ctx, app, 15*time.Second))
	close(gates[0])
	await(1, n/(c.Replicas-1)-1, n/(c.Replicas-1)+1, since)

	since = time.Now()
	startReplica(c.Replicas)
	close(gates[1])
	await(2, n/(c.Replicas+1)-1, n/(c.Replicas+1)+1, since)

	require.NoError(t, <-pubErr)
	// Everything published is handled, or the bound ends the wait (and
	// the caller sees what was lost).
	if !assert.Eventually(t, func() bool { return tl.count() >= total }, c.Bound/2, time.Millisecond, "handled %d of %d", tl.count(), total) {
		mu.Lock()
		for id, app := range running {
			tree, err := app.Tree(ctx)
			if err != nil {
				continue
			}
			var walk func(n *amqpactor.Node, depth int)
			walk = func(n *amqpactor.Node, depth int) {
				if n.Kind == "receiver" || n.Kind == "subscription" {
					t.Logf("replica %d %s%s %s %s %v %s", id, strings.Repeat(" ", depth), n.Kind, n.Address, n.State, n.Counters, n.LastError)
				}
				for _, c := range n.Children {
					walk(c, depth+1)
				}
			}
			walk(tree, 0)
		}
		mu.Unlock()
		if c.Diagnose != nil {
			t.Log(c.Diagnose())
		}
		tl.mu.Lock()
		var missing []string
		for g := range c.Groups {
			for seq := range c.PerGroup {
				if !tl.seen[g][seq] {
					missing = append(missing, fmt.Sprintf("g%d/%d(%s)", g, seq, c.Addr.Partition(c.Addr.PartitionFor("g"+strconv.Itoa(g))).Name()))
				}
			}
		}
		tl.mu.Unlock()
		t.Logf("%d missing: %v", len(missing), missing[:min(len(missing), 40)])
		t.FailNow()
	}
	require.NoError(t, stopWithin(context.Background(), pub, 10*time.Second))
	stopAll()
	res.Elapsed = time.Since(begin)

	res.Counts = tl.counts(int(published.Load()))
	return res
}
