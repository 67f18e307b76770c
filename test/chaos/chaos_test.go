package chaos

import (
	"flag"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

var (
	flagSeeds  = flag.Int("seeds", 0, "run seeds 1..N (after -first) instead of the fixed set")
	flagFirst  = flag.Uint64("first", 1, "the first seed -seeds and -run-for run")
	flagRunFor = flag.Duration("run-for", 0, "run consecutive seeds from -first until this much time has passed")
	flagSeed   = flag.Uint64("seed", 0, "run this one seed")
	flagKnown  = flag.Bool("known", false, "also run the regression seeds of defects still open")
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, ignoreThrottle)
}

// defaultSeeds is the set make test runs: about a minute under -race on two
// busy cores (a seed takes 0.2 to 2 s, some up to 6).
var defaultSeeds = func() []uint64 {
	var s []uint64
	for i := uint64(1); i <= 60; i++ {
		s = append(s, i)
	}
	return s
}()

// totals sums the figures of the seeds run.
type totals struct {
	mu                                       sync.Mutex
	seeds, failed                            int
	published, handled, dups, failures       int64
	requests, reqErrs, txCommitted, txRolled int
	overlaps                                 int
	faults                                   map[string]int
	maxStop                                  time.Duration
	maxStopSeed                              uint64 // the seed of the slowest Stop, to replay it
	failing                                  []uint64
}

func (t *totals) add(seed uint64, r result, failed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seeds++
	if failed {
		t.failed++
		t.failing = append(t.failing, seed)
	}
	t.published += r.published
	t.handled += r.handled
	t.dups += r.dups
	t.failures += r.failures
	t.overlaps += r.overlaps
	t.requests += r.requests
	t.reqErrs += r.reqErrs
	t.txCommitted += r.txCommitted
	t.txRolled += r.txRolledBack
	if r.maxStop > t.maxStop {
		t.maxStop, t.maxStopSeed = r.maxStop, seed
	}
	for k, v := range r.faults {
		t.faults[k] += v
	}
}

func (t *totals) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	ks := make([]string, 0, len(t.faults))
	for k := range t.faults {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var fs []string
	for _, k := range ks {
		fs = append(fs, fmt.Sprintf("%s=%d", k, t.faults[k]))
	}
	return fmt.Sprintf("seeds=%d failed=%d %v published=%d handled=%d duplicates=%d handler_failures=%d handover_overlaps=%d requests=%d request_errors=%d tx_committed=%d tx_rolled_back=%d stop_max=%s (seed %d) faults: %s",
		t.seeds, t.failed, t.failing, t.published, t.handled, t.dups, t.failures, t.overlaps, t.requests, t.reqErrs, t.txCommitted, t.txRolled,
		t.maxStop.Round(time.Millisecond), t.maxStopSeed, strings.Join(fs, " "))
}

// TestChaos runs the seed set (or the seeds the flags name), each a
// generated workload and schedule of faults, and checks the invariants
// after each.
func TestChaos(t *testing.T) {
	tot := &totals{faults: map[string]int{}}
	one := func(seed uint64) bool {
		var r result
		ok := t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) { r = runSeed(t, seed) })
		tot.add(seed, r, !ok)
		return ok
	}
	started := time.Now()
	switch {
	case *flagSeed != 0:
		one(*flagSeed)
	case *flagRunFor > 0:
		for s := *flagFirst; time.Since(started) < *flagRunFor; s++ {
			one(s)
		}
	case *flagSeeds > 0:
		for s := *flagFirst; s < *flagFirst+uint64(*flagSeeds); s++ {
			one(s)
		}
	default:
		for _, s := range defaultSeeds {
			one(s)
		}
	}
	t.Logf("FIGURES chaos: %s elapsed=%s", tot, time.Since(started).Round(time.Second))
}

// TestScheduleReplays: a seed gives the same scenario every time, and other
// seeds give others.
func TestScheduleReplays(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		a, b := generate(seed), generate(seed)
		if !reflect.DeepEqual(a, b) || a.String() != b.String() {
			t.Fatalf("seed %d generated two scenarios:\n%s\n%s", seed, a, b)
		}
	}
	if generate(1).String() == generate(2).String() {
		t.Fatal("seeds 1 and 2 generated the same scenario")
	}
}

// The seeds that found defects, each a regression test of its own.

// Seed 18: a replica stopped while it held a group's deliveries released
// them one by one, in order, and the in-process broker put each at the
// very front, so the replica that took the queue over ran the group
// backwards (fixed in inproc: a released message goes back behind the
// older ones).
func TestSeed0018_drainReleaseReversedGroupOrder(t *testing.T) { runSeed(t, 18) }

// Seed 19: a refused re-attach right after a reconnect made the q0
// subscription ask the connection to reconnect; the connection declines on
// a connection younger than 2 s, and the subscription stayed restarting for
// good, its queue unconsumed (fixed in actors/session: it keeps retrying).
func TestSeed0019_subscriptionStuckAfterDeclinedReconnect(t *testing.T) { runSeed(t, 19) }

// Seed 14: two detaches of q0 in a row; the receiver's delivered counter
// then exceeds settled + unsettled by the deliveries its ended link handed
// back unhandled, which no counter shows. The invariant is exact only for a
// receiver that never lost a link (the gap is reported, not fixed).
func TestSeed0014_countersAfterLinkEnd(t *testing.T) { runSeed(t, 14) }

// Seeds 33, 99, 342 and 11: a link ended (connections dropped, a
// detach, a crash of the subscription) while its handler ran a group's
// message; the broker handed the delivery on at once (to the next replica,
// or the subscription's new receiver), which began the group before the old
// handler had seen its context cancelled. That overlap is what a lost link
// allows (the old outcome is dropped); the invariant holds it against the
// runtime only if the old handling succeeded with its context live. These
// first failed when any overlap counted.
func TestSeed0033_handoverWhileOldHandlerRuns(t *testing.T) { runSeed(t, 33) }
func TestSeed0099_handoverWhileOldHandlerRuns(t *testing.T) { runSeed(t, 99) }
func TestSeed0342_handoverWhileOldHandlerRuns(t *testing.T) { runSeed(t, 342) }
func TestSeed0011_handoverWhileOldHandlerRuns(t *testing.T) { runSeed(t, 11) }

// Seed 528 (about one replay in four before the fix): after a dropped
// connection, a fleet replica's connection actor was crashed (resumed) while
// it waited out its reconnect backoff; the resume dialled at once and the
// timer, fired already, dialled again. The second connection was adopted
// over the first, whose watcher (connection.watch) nobody cancelled, so
// Stop ran to its whole bound (10 s) in Env.Wait and left both goroutines
// behind (fixed in actors/connection: one dial at a time, and a raced
// dial's connection is closed, not adopted).
func TestSeed0528_stopLeavesConnectionWatcher(t *testing.T) {
	for range 4 {
		if t.Failed() {
			return
		}
		runSeed(t, 528)
	}
}

// Seeds 386 and 561: the same, with the old handler returning nil a moment
// before its receiver cancelled its context (the broker acts on a link's
// end at once, the receiver hears of it through its mailbox): forgiven
// when the context ends within handoverBound of that return.
func TestSeed0386_handoverBeforeCancel(t *testing.T) { runSeed(t, 386) }
func TestSeed0561_handoverBeforeCancel(t *testing.T) { runSeed(t, 561) }

// Seed 13533 (one run in 5,000; it rarely replays): after a connection
// drop the stale handling is the second one. A replica's worker took a
// delivery of its lost link before its receiver heard of the loss, while the
// broker had already handed the partition to the next replica, whose
// handling began first. Forgiven when the second handling's context ends
// within handoverBound of its return (TestOverlapOfALostLinksLateHandling).
func TestSeed13533_lostLinkHandlesSecond(t *testing.T) { runSeed(t, 13533) }

// Seed 406: an ActorHandler actor read its delivery after the handler had
// timed out, while the partition's retry in place (Backoff) counted the
// attempt in that same Message: a data race (fixed: the actor gets a copy).
func TestSeed0406_actorReadsAfterTimeout(t *testing.T) { runSeed(t, 406) }

// Seed 253: an ActorHandler delivery failed by the runtime before its actor
// saw it (its context ended as the worker began it) was not counted as a
// failure by the harness, which then held the group order against the
// messages that ran before its redelivery.
func TestSeed0253_actorDeliveryFailedByTheRuntime(t *testing.T) { runSeed(t, 253) }

// Seeds 1199 and 1384 (without -race, every replay of 1199 on the code
// before the fix; with it, rarely): a crash of the q0 receiver while a
// group's message waited for its retry in place (Backoff) or its handler
// ran. The new link attached and received before the old link's close, on
// a goroutine, had given back what it held, so newer messages of the group
// ran before older ones that never failed (fixed in actors/receiver: an
// attach waits for the last link's close).
func TestSeed1199_receiverRestartOvertakesHeld(t *testing.T) {
	runSeed(t, 1199)
	runSeed(t, 1384)
}
