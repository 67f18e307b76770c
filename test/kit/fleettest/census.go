package fleettest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/internal/protocol"
)

// CensusConfig is one run of the foreign-census scenario: Replicas Apps of
// one name (2 when zero) share a Partitioned address while one publisher
// streams ordered groups; once the partitions are balanced, Foreign attaches
// consumers to the census queue that are no replicas, and the run counts the
// hand-overs for Window.
type CensusConfig struct {
	// Config is the run's addresses and Apps; its zero Replicas, Groups
	// and Bound mean 2, 16 and 3 minutes here (PerGroup is not used: the
	// stream runs until the window ends).
	Config
	// Foreign attaches the consumers that are no replicas to census, the
	// census queue, and returns what detaches them.
	Foreign func(ctx context.Context, census amqpactor.Address) (detach func())
	// Window is how long hand-overs are counted once Foreign attached;
	// 30 s when zero.
	Window time.Duration
}

// CensusResult is what a foreign-census run measured.
type CensusResult struct {
	Counts
	// InWindow is the hand-overs counted during the window; Held the
	// partitions each replica held when it ended.
	InWindow int
	Held     [][]int
	Elapsed  time.Duration
}

func (r CensusResult) String() string {
	return fmt.Sprintf("published %d, handled %d, lost %d, duplicates %d, inversions %d, overlaps %d, hand-overs %d (%d in the window), held %v at its end, %v",
		r.Published, r.Handled, r.Lost, r.Duplicates, r.Inversions, r.Overlaps, r.Handovers, r.InWindow, r.Held, r.Elapsed.Round(time.Millisecond))
}

// RunForeignCensus runs the foreign-census scenario. It asserts on t only
// what it needs to go on (Start, Publish, the first balance within 30 s,
// everything published handled within the bound); the caller asserts on
// the result.
func RunForeignCensus(t *testing.T, c CensusConfig) CensusResult {
	t.Helper()
	if c.Replicas == 0 {
		c.Replicas = 2
	}
	c.Config = c.orDefaults(16, 1, 3*time.Minute)
	if c.Window == 0 {
		c.Window = 30 * time.Second
	}
	ctx, cancel, tl := c.begin(t)
	defer cancel()
	n := c.Addr.Partitions()

	var apps []*amqpactor.App
	for id := range c.Replicas {
		app := c.NewApp(c.AppName)
		_, err := app.Subscribe(c.Addr, tl.handler(id, nil, nil))
		require.NoError(t, err)
		require.NoError(t, app.Start(ctx))
		apps = append(apps, app)
	}
	t.Cleanup(func() {
		for i, a := range apps {
			assert.NoError(t, stopWithin(context.Background(), a, 15*time.Second), "replica %d", i)
		}
	})
	pub := c.publisher(ctx, t)

	// The stream: one message of every group each round, a round every
	// 20 ms, so that every partition has deliveries (which is how a
	// replica knows it holds one where the broker does not say) until the
	// window ends.
	begin := time.Now()
	var published atomic.Int64
	done := make(chan struct{})
	pubErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pace := time.NewTicker(20 * time.Millisecond)
		defer pace.Stop()
		for seq := 0; ; seq++ {
			for g := range c.Groups {
				if err := c.publish(ctx, pub, g, seq); err != nil {
					pubErr <- err
					return
				}
				published.Add(1)
			}
			select {
			case <-pace.C:
			case <-done:
				pubErr <- nil
				return
			case <-ctx.Done():
				pubErr <- ctx.Err()
				return
			}
		}
	}()
	stopStream := sync.OnceFunc(func() { close(done); wg.Wait() })
	defer stopStream()

	held := func() ([][]int, bool) {
		owners := make([]int, n)
		var out [][]int
		for _, app := range apps {
			h, err := Held(ctx, app, c.Addr)
			if err != nil {
				return nil, false
			}
			for _, p := range h {
				owners[p]++
			}
			out = append(out, h)
		}
		for _, o := range owners {
			if o != 1 {
				return out, false
			}
		}
		return out, true
	}
	// Balanced by a true census first: each replica holds its share.
	share := (n + c.Replicas - 1) / c.Replicas
	var res CensusResult
	require.Eventually(t, func() bool {
		h, ok := held()
		if !ok {
			return false
		}
		for _, p := range h {
			if len(p) > share {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "the replicas balance by a true census first (%s)", tl.counts(int(published.Load())))

	before := int(tl.handovers.Load())
	detach := c.Foreign(ctx, protocol.CensusOf(c.Addr))
	// The window is what is measured: hand-overs are counted over it, and
	// nothing it could await ends it sooner.
	select {
	case <-time.After(c.Window):
	case <-ctx.Done():
		require.NoError(t, ctx.Err())
	}
	res.InWindow = int(tl.handovers.Load()) - before
	res.Held, _ = held()
	detach()

	stopStream()
	require.NoError(t, <-pubErr)
	total := int(published.Load())
	assert.Eventually(t, func() bool { return tl.count() >= total }, c.Bound/2, time.Millisecond, "handled %d of %d", tl.count(), total)
	for i, a := range apps {
		require.NoError(t, stopWithin(context.Background(), a, 15*time.Second), "replica %d", i)
	}
	apps = nil
	require.NoError(t, stopWithin(context.Background(), pub, 10*time.Second))
	res.Elapsed = time.Since(begin)
	res.Counts = tl.counts(total)
	return res
}
