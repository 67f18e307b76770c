// Package chaos runs generated fault schedules against Apps on the
// in-process broker and checks, after every run, the invariants the runtime
// promises: nothing published with a nil return is lost (duplicates are
// counted), group-id order within a replica for messages that succeed at
// once, one handler per group at a time, every request answered before its
// deadline, transactions all or nothing, no tree node attached without its
// actor, receiver counters that add up, a bounded Stop and no goroutine left.
//
// Every choice of a scenario (its workload and its schedule of faults) comes
// from one seed, so a failing run prints its seed and schedule and the same
// seed replays it:
//
//	go test -race ./test/chaos                       # the fixed seed set
//	go test -race ./test/chaos -seeds 500            # seeds 1..500
//	go test -race ./test/chaos -run-for 10m          # as many seeds as fit
//	go test -race ./test/chaos -seed 1234 -v         # one seed, its schedule logged
//
// docs/RELIABILITY.md ("Chaos: generated fault schedules") tabulates the
// runs.
package chaos
