// Package fleettest runs one scenario on any broker: several replicas (Apps
// of one name) subscribed to a Partitioned address while one publisher
// sends ordered groups, one replica stopped mid-stream and another started.
// It measures what fleet-wide ordered partitions promise: nothing lost,
// every group in order, no partition handled by two replicas at once.
package fleettest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/internal/protocol"
)

// Config is one run. NewApp builds an App named name on the broker under
// test; Replicas start first, then one is stopped and one more started.
type Config struct {
	Addr     amqpactor.Address // a Partitioned address
	AppName  string
	NewApp   func(name string) *amqpactor.App
	Replicas int // 3 when zero
	Groups   int // 16 when zero
	PerGroup int // 500 when zero
	// Bound limits the whole run; 60 s when zero.
	Bound time.Duration
}

// orDefaults is c with its zero fields set: 3 replicas, and the groups,
// messages per group and bound given.
func (c Config) orDefaults(groups, perGroup int, bound time.Duration) Config {
	if c.Replicas == 0 {
		c.Replicas = 3
	}
	if c.Groups == 0 {
		c.Groups = groups
	}
	if c.PerGroup == 0 {
		c.PerGroup = perGroup
	}
	if c.Bound == 0 {
		c.Bound = bound
	}
	return c
}

// Counts is what both scenarios count of the messages and their handling.
type Counts struct {
	Published int
	// Handled counts distinct messages handled; Lost = Published - Handled.
	Handled, Lost int
	// Duplicates are handlings of a message already handled (a redelivery
	// after a hand-over), counted apart from Inversions.
	Duplicates int
	// Inversions: a message handled for the first time although a later
	// one of its group (higher sequence number) had already been handled
	// for the first time. Publishing is sequential per group, so this is
	// exactly a group going out of order.
	Inversions int
	// Overlaps: a handler entered on one replica while another replica's
	// handler of the same partition queue had not returned.
	Overlaps int
	// Handovers: times a partition's handling moved to another replica.
	Handovers int
}

// Result is what a run measured.
type Result struct {
	Counts
	// InFlightAtStop is published - handled when the stop began.
	InFlightAtStop int
	// ByReplica is how many deliveries each replica handled.
	ByReplica []int
	Elapsed   time.Duration
}

func (c Counts) counts() Counts { return c }

// RequireSound logs r and fails t unless r published published messages and
// lost none, none came out of its group's order, and no partition was handled
// by two replicas at once. r is a Result or a BalanceResult.
func RequireSound(t testing.TB, r interface {
	String() string
	counts() Counts
}, published int) {
	t.Helper()
	t.Log(r)
	c := r.counts()
	require.Equal(t, published, c.Published)
	require.Zero(t, c.Lost, r.String())
	require.Zero(t, c.Inversions, r.String())
	require.Zero(t, c.Overlaps, r.String())
}

func (r Result) String() string {
	return fmt.Sprintf("published %d, handled %d, lost %d, duplicates %d, inversions %d, overlaps %d, hand-overs %d, in flight at stop %d, by replica %v, %v",
		r.Published, r.Handled, r.Lost, r.Duplicates, r.Inversions, r.Overlaps, r.Handovers, r.InFlightAtStop, r.ByReplica, r.Elapsed.Round(time.Millisecond))
}

// tally records handlings.
type tally struct {
	parts map[string]*atomic.Int64 // partition queue → owner<<32 | handlers in flight

	mu        sync.Mutex
	seen      []map[int]bool // per group
	maxFirst  []int
	handled   int
	dups, inv int
	byReplica []int
	overlaps  atomic.Int64
	handovers atomic.Int64
}

// newTally is the tally of a run of groups over addr's partitions with
// replicas replicas (and one more started later).
func newTally(addr amqpactor.Address, groups, replicas int) *tally {
	tl := &tally{parts: map[string]*atomic.Int64{}, seen: make([]map[int]bool, groups), maxFirst: make([]int, groups),
		byReplica: make([]int, replicas+1)}
	for i := range addr.Partitions() {
		tl.parts[addr.Partition(i).Name()] = new(atomic.Int64)
	}
	for g := range tl.seen {
		tl.seen[g] = map[int]bool{}
		tl.maxFirst[g] = -1
	}
	return tl
}

// handler is replica id's handler: while it runs its partition is marked
// busy (enter); it reads the group and sequence from the message, waits for
// hold (nil: no wait), records the handling and tells recorded (nil: no one)
// how many distinct messages are handled so far.
func (t *tally) handler(id int, hold func(context.Context) error, recorded func(handled int)) amqpactor.Handler {
	return func(hctx context.Context, m *amqpactor.Message) error {
		p := protocol.PartitionFrom(hctx)
		if p == nil {
			return fmt.Errorf("no partition in the handler's context")
		}
		q := p.Address.Name()
		counted := t.enter(q, int64(id+1))
		defer func() {
			if counted {
				t.exit(q)
			}
		}()
		g, err := strconv.Atoi(m.GroupID[1:])
		if err != nil {
			return amqpactor.Reject(err)
		}
		seq, err := strconv.Atoi(string(m.Body))
		if err != nil {
			return amqpactor.Reject(err)
		}
		if hold != nil {
			if err := hold(hctx); err != nil {
				return err
			}
		}
		n := t.record(id, g, seq)
		if recorded != nil {
			recorded(n)
		}
		return nil
	}
}

// enter marks replica (1-based) as handling in partition queue q; it
// reports whether it counted (an overlap is recorded and not counted).
func (t *tally) enter(q string, replica int64) bool {
	st := t.parts[q]
	for {
		v := st.Load()
		owner, n := v>>32, v&0xffffffff
		switch {
		case n == 0:
			if st.CompareAndSwap(v, replica<<32|1) {
				if owner != 0 && owner != replica {
					t.handovers.Add(1)
				}
				return true
			}
		case owner == replica:
			if st.CompareAndSwap(v, v+1) {
				return true
			}
		default:
			t.overlaps.Add(1)
			return false
		}
	}
}

func (t *tally) exit(q string) { t.parts[q].Add(-1) }

// record counts one handling and returns the distinct messages handled.
func (t *tally) record(replica, group, seq int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byReplica[replica]++
	if t.seen[group][seq] {
		t.dups++
		return t.handled
	}
	t.seen[group][seq] = true
	t.handled++
	if seq < t.maxFirst[group] {
		t.inv++
	}
	t.maxFirst[group] = max(t.maxFirst[group], seq)
	return t.handled
}

// counts is the tally's Counts once published messages were sent.
func (t *tally) counts(published int) Counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Counts{
		Published: published, Handled: t.handled, Lost: published - t.handled,
		Duplicates: t.dups, Inversions: t.inv,
		Overlaps: int(t.overlaps.Load()), Handovers: int(t.handovers.Load()),
	}
}

// begin is what both scenarios start with: the context bounding the run
// and the tally of its handlings; c has its defaults set.
func (c Config) begin(t *testing.T) (context.Context, context.CancelFunc, *tally) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.Bound)
	require.Positive(t, c.Addr.Partitions())
	return ctx, cancel, newTally(c.Addr, c.Groups, c.Replicas)
}

// publisher starts the run's publishing App, stopped at cleanup.
func (c Config) publisher(ctx context.Context, t *testing.T) *amqpactor.App {
	t.Helper()
	pub := c.NewApp(c.AppName + "-publisher")
	require.NoError(t, pub.Start(ctx))
	t.Cleanup(func() { _ = stopWithin(context.Background(), pub, 10*time.Second) })
	return pub
}

// stopWithin stops app, bounded by d under parent.
func stopWithin(parent context.Context, app *amqpactor.App, d time.Duration) error {
	ctx, cancel := context.WithTimeout(parent, d)
	defer cancel()
	return app.Stop(ctx)
}

// publish sends message seq of group g, the group in its GroupID and the
// sequence number as its body, as the tally's handler reads them.
func (c Config) publish(ctx context.Context, pub *amqpactor.App, g, seq int) error {
	m := &amqpactor.Message{GroupID: "g" + strconv.Itoa(g), Body: []byte(strconv.Itoa(seq))}
	if err := pub.Publish(ctx, c.Addr, m); err != nil {
		return fmt.Errorf("group %d seq %d: %w", g, seq, err)
	}
	return nil
}

func (t *tally) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.handled
}

// Run runs the scenario and returns what it measured; it fails t only when
// the run itself cannot go on (a Start or Publish error, the bound).
func Run(t *testing.T, c Config) Result {
	t.Helper()
	c = c.orDefaults(16, 500, 60*time.Second)
	ctx, cancel, tl := c.begin(t)
	defer cancel()
	total := c.Groups * c.PerGroup

	// Once a quarter is handled, handlers hold until the stop has been
	// asked for, so the replica stops with a backlog in flight.
	var held atomic.Bool
	release := make(chan struct{})

	var mu sync.Mutex
	var running []*amqpactor.App // index = replica
	startReplica := func(id int) {
		app := c.NewApp(c.AppName)
		_, err := app.Subscribe(c.Addr, tl.handler(id, func(hctx context.Context) error {
			if held.Load() {
				select {
				case <-release:
				case <-hctx.Done():
					return hctx.Err()
				}
			}
			return nil
		}, func(handled int) {
			if handled == total/4 {
				held.Store(true)
			}
		}), amqpactor.WithPartitions(4))
		require.NoError(t, err)
		require.NoError(t, app.Start(ctx))
		mu.Lock()
		running = append(running, app)
		mu.Unlock()
	}
	for id := range c.Replicas {
		startReplica(id)
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range running {
			_ = stopWithin(context.Background(), a, 10*time.Second)
		}
	})

	pub := c.publisher(ctx, t)

	begin := time.Now()
	// The second half of every group waits for the stop to have begun, so
	// the stop is always mid-stream.
	stopping := make(chan struct{})
	var published atomic.Int64
	errs := make(chan error, c.Groups)
	var wg sync.WaitGroup
	for g := range c.Groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range c.PerGroup {
				if seq == c.PerGroup/2 {
					select {
					case <-stopping:
					case <-ctx.Done():
						errs <- ctx.Err()
						return
					}
				}
				if err := c.publish(ctx, pub, g, seq); err != nil {
					errs <- err
					return
				}
				published.Add(1)
			}
		}()
	}

	// Stop the replica that has handled most (the one holding partitions)
	// once the first half is published and a quarter handled.
	require.Eventually(t, func() bool { return held.Load() && published.Load() == int64(total/2) }, c.Bound, time.Millisecond)
	tl.mu.Lock()
	victim := 0
	for id := range c.Replicas {
		if tl.byReplica[id] > tl.byReplica[victim] {
			victim = id
		}
	}
	res := Result{InFlightAtStop: int(published.Load()) - tl.handled}
	tl.mu.Unlock()
	mu.Lock()
	app := running[victim]
	mu.Unlock()
	stopped := make(chan error, 1)
	go func() {
		stopped <- stopWithin(ctx, app, 15*time.Second)
	}()
	close(stopping)
	close(release)
	require.NoError(t, <-stopped)
	startReplica(c.Replicas)

	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// Everything published is handled, or the bound ends the wait (and
	// the caller sees what was lost).
	assert.Eventually(t, func() bool { return tl.count() >= total }, c.Bound, time.Millisecond)
	// Stop every replica so that late redeliveries are counted too.
	require.NoError(t, stopWithin(context.Background(), pub, 10*time.Second))
	mu.Lock()
	for _, a := range running {
		require.NoError(t, stopWithin(context.Background(), a, 10*time.Second))
	}
	mu.Unlock()
	res.Elapsed = time.Since(begin)

	res.Counts = tl.counts(int(published.Load()))
	tl.mu.Lock()
	defer tl.mu.Unlock()
	res.ByReplica = append([]int(nil), tl.byReplica...)
	return res
}
