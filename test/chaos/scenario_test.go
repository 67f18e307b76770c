package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// behaviour is how a subscription's handler misbehaves. The rates are per
// thousand first deliveries (delivery-count 0), so every message succeeds
// by its second delivery at the latest and nothing goes to a dead letter.
type behaviour struct {
	Fail, Panic, Hang, Slow int
	Actor                   bool          // ActorHandler: an actor answers each delivery
	Backoff                 bool          // RetryPolicy.Backoff: failures retried in place
	Partitions              int           // WithPartitions
	Credit                  uint32        // WithCredit
	Timeout                 time.Duration // WithHandlerTimeout; 0 for none (no Hang then)
}

func (b behaviour) String() string {
	s := fmt.Sprintf("partitions=%d credit=%d fail=%d‰ panic=%d‰ hang=%d‰ slow=%d‰", b.Partitions, b.Credit, b.Fail, b.Panic, b.Hang, b.Slow)
	if b.Timeout > 0 {
		s += " timeout=" + b.Timeout.String()
	}
	if b.Actor {
		s += " actor"
	}
	if b.Backoff {
		s += " backoff"
	}
	return s
}

// consumer is one subscription of the workload: what it subscribes to and
// how its handler behaves.
type consumer struct {
	Name string // q0, q1, events/t0, events/t1, fleet, txq
	behaviour
}

// stream is one publisher of the workload.
type stream struct {
	Name   string
	To     string // a consumer's address: q0, q1, events, fleet
	Mode   string // publish, async, batch, group
	Count  int    // messages (per group in mode group)
	Groups int    // mode group: groups published at once, each in order
	Window int    // async and batch: messages in flight at once
}

// txn is one transaction of the workload.
type txn struct {
	Size   int
	Commit bool
}

// step is one fault of the schedule. It fires once the workload has done
// At‰ of its operations (or has finished).
type step struct {
	At     int
	Kind   string
	Target string        // an address (kind:name), an App (svc, fleet#i) or a subscription
	Actor  string        // crash: the kind of node
	N      int           // crash: which node of that kind (mod their number)
	Burst  int           // crash: how many crashes in a row (1 for one)
	For    time.Duration // windows: refuse-attach, reject-publish, pause
}

func (s step) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "@%3d‰ %s", s.At, s.Kind)
	if s.Target != "" {
		b.WriteString(" " + s.Target)
	}
	if s.Actor != "" {
		fmt.Fprintf(&b, " %s#%d", s.Actor, s.N)
	}
	if s.Burst > 1 {
		fmt.Fprintf(&b, " x%d", s.Burst)
	}
	if s.For > 0 {
		b.WriteString(" for " + s.For.String())
	}
	return b.String()
}

// scenario is everything one seed chooses.
type scenario struct {
	Seed      uint64
	Replicas  int // fleet Apps at the start (1..4)
	FleetN    int // Partitioned("fleet", FleetN)
	Consumers []consumer
	Streams   []stream
	Requests  int
	ReqBound  time.Duration
	Txns      []txn
	Steps     []step
}

// ops is the number of operations the workload confirms, the scale of At.
func (sc *scenario) ops() int {
	n := sc.Requests
	for _, s := range sc.Streams {
		if s.Mode == "group" {
			n += s.Count * s.Groups
		} else {
			n += s.Count
		}
	}
	return n + len(sc.Txns)
}

func (sc *scenario) consumer(name string) *consumer {
	for i := range sc.Consumers {
		if sc.Consumers[i].Name == name {
			return &sc.Consumers[i]
		}
	}
	return nil
}

// String is the seed, the workload and the schedule, one line per step.
func (sc *scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: fleet Partitioned(fleet,%d) x %d replicas; %d requests (bound %s); %d ops\n",
		sc.Seed, sc.FleetN, sc.Replicas, sc.Requests, sc.ReqBound, sc.ops())
	for _, c := range sc.Consumers {
		fmt.Fprintf(&b, "  consumer %-9s %s\n", c.Name, c.behaviour)
	}
	for _, s := range sc.Streams {
		fmt.Fprintf(&b, "  stream %-4s %-6s -> %-6s count=%d", s.Name, s.Mode, s.To, s.Count)
		if s.Groups > 0 {
			fmt.Fprintf(&b, " groups=%d", s.Groups)
		}
		if s.Window > 0 {
			fmt.Fprintf(&b, " window=%d", s.Window)
		}
		b.WriteString("\n")
	}
	for i, t := range sc.Txns {
		fmt.Fprintf(&b, "  txn %d size=%d commit=%v\n", i, t.Size, t.Commit)
	}
	for i, s := range sc.Steps {
		fmt.Fprintf(&b, "  step %2d %s\n", i, s)
	}
	return b.String()
}

// The kinds of actor a crash step may hit.
var actorKinds = []string{"connection", "publisher", "sender", "subscription", "receiver", "dispatcher", "partition", "requests", "txn"}

// The kinds of fault a step may be, with their weights.
var stepKinds = []struct {
	kind   string
	weight int
}{
	{"detach", 4}, {"end-sessions", 3}, {"drop-connections", 2}, {"refuse-attach", 2},
	{"reject-publish", 2}, {"crash", 5}, {"pause", 2}, {"replica-swap", 2}, {"stop-svc", 1},
}

// generate makes the scenario of seed: every choice comes from one PCG
// source seeded by it, so the same seed gives the same scenario.
func generate(seed uint64) *scenario {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	sc := &scenario{Seed: seed, Replicas: 1 + r.IntN(4), FleetN: 1 + r.IntN(4)}
	beh := func(hang bool) behaviour {
		b := behaviour{
			Fail: pick(r, 0, 0, 20, 100), Panic: pick(r, 0, 0, 10, 50), Slow: pick(r, 0, 50, 200),
			Actor: r.IntN(4) == 0, Backoff: r.IntN(3) == 0,
			Partitions: 1 + r.IntN(4), Credit: uint32(pick(r, 4, 16, 64, 256)),
		}
		if hang || b.Actor || r.IntN(3) == 0 {
			b.Timeout = time.Duration(100+r.IntN(200)) * time.Millisecond
			b.Hang = pick(r, 0, 5, 20)
		}
		return b
	}
	sc.Consumers = []consumer{
		{Name: "q0", behaviour: beh(false)},
		{Name: "q1", behaviour: beh(false)},
		{Name: "events/t0", behaviour: beh(false)},
		{Name: "events/t1", behaviour: beh(false)},
		{Name: "fleet", behaviour: beh(false)},
		{Name: "txq", behaviour: behaviour{Partitions: 1, Credit: 16}},
	}
	modes := []string{"publish", "async", "batch"}
	sc.Streams = []stream{
		{Name: "g0", To: "fleet", Mode: "group", Count: 10 + r.IntN(30), Groups: 2 + r.IntN(8)},
		{Name: "g1", To: "q0", Mode: "group", Count: 10 + r.IntN(30), Groups: 1 + r.IntN(6)},
	}
	for i := range 2 + r.IntN(3) {
		s := stream{Name: fmt.Sprintf("s%d", i), To: pickS(r, "q0", "q1", "events", "fleet"), Mode: pickS(r, modes...), Count: 50 + r.IntN(200)}
		if s.Mode != "publish" {
			s.Window = 1 + r.IntN(32)
		}
		sc.Streams = append(sc.Streams, s)
	}
	sc.Requests = r.IntN(40)
	sc.ReqBound = time.Duration(500+r.IntN(1500)) * time.Millisecond
	for range r.IntN(3) {
		sc.Txns = append(sc.Txns, txn{Size: 1 + r.IntN(5), Commit: r.IntN(2) == 0})
	}

	total := 0
	for _, k := range stepKinds {
		total += k.weight
	}
	addrs := []string{"queue:q0", "queue:q1", "topic:events", "queue:rpc", "queue:txq"}
	for p := range sc.FleetN {
		addrs = append(addrs, fmt.Sprintf("queue:fleet.p%d", p))
	}
	subs := []string{"q0", "q1", "events/t0", "events/t1", "txq"}
	n := 2 + r.IntN(7)
	ats := make([]int, n)
	for i := range ats {
		ats[i] = r.IntN(900)
	}
	slices.Sort(ats)
	for _, at := range ats {
		w := r.IntN(total)
		kind := ""
		for _, k := range stepKinds {
			if w < k.weight {
				kind = k.kind
				break
			}
			w -= k.weight
		}
		s := step{At: at, Kind: kind}
		switch kind {
		case "detach", "end-sessions", "refuse-attach":
			s.Target = pickS(r, addrs...)
		case "reject-publish":
			// Requests and fleet messages go to queues; the topic too.
			s.Target = pickS(r, addrs[:4]...)
		case "crash":
			s.Target = "svc"
			if r.IntN(3) == 0 {
				s.Target = fmt.Sprintf("fleet#%d", r.IntN(4))
			}
			s.Actor, s.N = pickS(r, actorKinds...), r.IntN(8)
		case "pause":
			s.Target = pickS(r, subs...)
		case "replica-swap":
			s.Target = fmt.Sprintf("fleet#%d", r.IntN(4))
			if r.IntN(2) == 0 {
				s.Actor = "start-first"
			}
		}
		switch kind {
		case "refuse-attach", "reject-publish", "pause":
			s.For = time.Duration(20+r.IntN(200)) * time.Millisecond
		}
		sc.Steps = append(sc.Steps, s)
	}
	bursts(sc)
	return sc
}

// maxBurst bounds the crashes one seed sends a node kind of one App: below
// the default strategy's 10 restarts a minute, so that every burst is one
// the runtime must recover from with nothing lost.
const maxBurst = 9

// bursts makes some crash steps a burst of crashes in a row, which spend a
// restart budget and reach the parent's own recovery (a sender or partition
// started again, a receiver's subscription rebuilt). It draws from a source
// of its own, so every seed's schedule is otherwise what it always was.
func bursts(sc *scenario) {
	r := rand.New(rand.NewPCG(sc.Seed^0x5bd1e995, sc.Seed))
	spent := map[string]int{}
	for i := range sc.Steps {
		s := &sc.Steps[i]
		if s.Kind != "crash" {
			continue
		}
		s.Burst = 1
		if r.IntN(3) == 0 {
			s.Burst = 2 + r.IntN(maxBurst-1)
		}
		key := s.Target + "/" + s.Actor
		s.Burst = max(min(s.Burst, maxBurst-spent[key]), 0)
		spent[key] += s.Burst
	}
}

func pick(r *rand.Rand, vs ...int) int        { return vs[r.IntN(len(vs))] }
func pickS(r *rand.Rand, vs ...string) string { return vs[r.IntN(len(vs))] }
