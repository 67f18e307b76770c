// Command soak runs an App against a live RabbitMQ 4 for a given time,
// through a fault proxy that cuts, black-holes and slows its connection,
// and with broker restarts, while publishers, a partitioned subscription and
// request/reply run. It checks what the in-process chaos suite checks that
// a live broker allows: nothing published with a nil return is lost
// (duplicates counted), no group is handled by two workers at once, every
// request ends (reply or error) by its deadline, Stop keeps its bound and
// leaves no goroutine; and it samples the heap, goroutines, connections and
// queue depths every -sample, failing if any grows without bound.
//
//	go run ./test/soak -url amqp://guest:guest@127.0.0.1:5673/ -for 3m
//
// Given the three-node test cluster (-cluster, default $AMQP_CLUSTER_URLS),
// it runs in cluster mode: the App dials the nodes, each through a fault
// proxy of its own, with failover, and the schedule kills a node (mostly
// the one the App is on) and restarts it, one node at a time, through the
// test broker's script, instead of restarting a single broker.
//
//	AMQP_CLUSTER_URLS="$(bash test/broker/rabbitmq4.sh cluster-urls)" go run ./test/soak -for 2m
//
// It exits 1 on a broken invariant, printing the seed and the faults it
// injected; -seed replays a schedule (the faults' times and kinds; the
// broker's own timing is not replayed).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
	"github.com/amqpactor/amqpactor/test/kit/clusterctl"
	"github.com/amqpactor/amqpactor/test/kit/testproxy"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

func main() {
	var (
		rawURL   = flag.String("url", os.Getenv("AMQP_URL"), "the broker (default $AMQP_URL)")
		runFor   = flag.Duration("for", 3*time.Minute, "how long the faults and traffic run")
		sample   = flag.Duration("sample", time.Minute, "how often the heap, goroutines, connections and queue depths are sampled")
		seed     = flag.Uint64("seed", 0, "the schedule's seed (0: one from the clock, printed)")
		restarts = flag.Bool("restarts", os.Geteuid() == 0, "restart the broker now and then (stop_app/start_app through -broker-script; needs root)")
		script   = flag.String("broker-script", "test/broker/rabbitmq4.sh", "the test broker's script, for -restarts and -kills")
		cluster  = flag.String("cluster", os.Getenv(clusterctl.EnvURLs), "the test cluster's three node URLs, space separated (default $"+clusterctl.EnvURLs+"): cluster mode")
		kills    = flag.Bool("kills", os.Geteuid() == 0, "in cluster mode, kill and restart nodes now and then (through -broker-script; needs root)")
	)
	flag.Parse()
	nodes := strings.Fields(*cluster)
	switch {
	case len(nodes) > 0 && len(nodes) != clusterctl.Nodes:
		fmt.Fprintf(os.Stderr, "soak: -cluster names %d nodes, not %d\n", len(nodes), clusterctl.Nodes)
		os.Exit(2)
	case len(nodes) > 0:
		// The single broker's restarts are not the cluster's: its nodes
		// are killed instead.
		*restarts = false
	case *rawURL == "":
		fmt.Fprintln(os.Stderr, "soak: no broker: give -url or set AMQP_URL, or -cluster")
		os.Exit(2)
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	s := &soak{url: *rawURL, nodes: nodes, seed: *seed, runFor: *runFor, sampleEvery: *sample, restarts: *restarts,
		kills: *kills && len(nodes) > 0, script: *script}
	err := s.run()
	fmt.Println(s.report())
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: FAILED (seed %d): %v\nfaults: %s\n", s.seed, err, strings.Join(s.schedule, "; "))
		os.Exit(1)
	}
}

type soak struct {
	url, script string
	// nodes are the cluster's node URLs in cluster mode (nil otherwise);
	// proxies are the fault proxies the App dials, one a node in cluster
	// mode.
	nodes         []string
	proxies       []*testproxy.Proxy
	seed          uint64
	runFor        time.Duration
	sampleEvery   time.Duration
	restarts      bool
	kills         bool
	schedule      []string // the faults, as injected
	faults        map[string]int
	samples       []sample
	published     atomic.Int64
	publishErrors atomic.Int64
	requests      atomic.Int64
	requestErrors atomic.Int64
	late          atomic.Int64 // requests that returned past their deadline
	overlaps      atomic.Int64 // a group handled by two workers at once
	mu            sync.Mutex
	// handled counts the deliveries of each message, by publisher and
	// sequence; sent is how many of each publisher's returned nil (they
	// publish in sequence). Compact, so the soak's own tally does not
	// show as growth of the heap.
	handled [publishers][]uint16
	sent    [publishers]int
	// sentAt is when each publish returned nil, in milliseconds from the
	// run's start, so that a lost message can be set against the faults.
	sentAt           [publishers][]uint32
	start            time.Time
	busy             map[string]bool // groups being handled
	stopTook         time.Duration
	goroutinesBefore int
}

type sample struct {
	at                  time.Duration
	heapMiB             float64
	goroutines          int
	connections         int
	node                int // in cluster mode, the node (1..3) the App is attached to; 0 when not known
	ordersDepth, rpcDep uint64
}

const (
	groups        = 64
	publishers    = 4
	requestEvery  = 20 * time.Millisecond
	publishEvery  = 2 * time.Millisecond
	requestBound  = 5 * time.Second
	drainBound    = 90 * time.Second
	stopBound     = 30 * time.Second
	settleBackoff = 2 * time.Second
)

func (s *soak) run() error {
	s.busy, s.faults = map[string]bool{}, map[string]int{}
	rng := rand.New(rand.NewPCG(s.seed, s.seed^0x9e3779b97f4a7c15))
	targets := s.nodes
	if len(targets) == 0 {
		targets = []string{s.url}
	}
	var viaProxy []string
	for _, target := range targets {
		u, err := url.Parse(target)
		if err != nil {
			return fmt.Errorf("url: %w", err)
		}
		proxy, err := testproxy.Start(u.Host)
		if err != nil {
			return err
		}
		defer proxy.Close()
		s.proxies = append(s.proxies, proxy)
		u.Host = proxy.Addr()
		viaProxy = append(viaProxy, u.String())
	}
	dialOpts := []amqpactor.DialOption{amqpactor.WithIdleTimeout(4 * time.Second)}
	var connector amqpactor.Connector
	if len(s.nodes) > 0 {
		connector = clusterctl.Dial(viaProxy, dialOpts...)
	} else {
		connector = amqpactor.Dial(viaProxy[0], append([]amqpactor.DialOption{amqpactor.WithDialect(amqpactor.RabbitMQ4)}, dialOpts...)...)
	}

	tag := strconv.FormatUint(s.seed%1_000_000, 36)
	orders := amqpactor.Queue("soak." + tag + ".orders")
	rpc := amqpactor.Queue("soak." + tag + ".rpc")
	defer s.deleteQueues(orders.Name(), rpc.Name())

	runtime.GC()
	s.goroutinesBefore = runtime.NumGoroutine()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	app := amqpactor.New(connector,
		amqpactor.WithName("soak-"+tag), amqpactor.WithLogger(log),
		amqpactor.WithBackoff(50*time.Millisecond, settleBackoff), amqpactor.WithCloseTimeout(5*time.Second))
	if _, err := app.Subscribe(orders, s.handle, amqpactor.WithPartitions(4)); err != nil {
		return err
	}
	if _, err := app.Subscribe(rpc, amqpactor.Responder(func(_ context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: req.Body}, nil
	})); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	err := app.Start(sctx)
	cancel()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			ctx, cancel := context.WithTimeout(context.Background(), stopBound)
			defer cancel()
			_ = app.Stop(ctx)
		}
	}()

	start := time.Now()
	s.mu.Lock()
	s.start = start
	s.mu.Unlock()
	traffic, stopTraffic := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() { s.publish(traffic, app, orders, p) })
	}
	wg.Go(func() { s.request(traffic, app, rpc) })
	s.take(app, start)
	s.inject(rng, app, start)
	stopTraffic()
	wg.Wait()
	for _, p := range s.proxies {
		p.BlackHole(false)
		p.Latency(0)
	}

	// Everything published comes, after the last fault.
	deadline := time.Now().Add(drainBound)
	for s.missing() > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // polling a count: nothing to await
	}
	// What is still queued then are copies of handled messages (a retried
	// publish, a redelivery): they are consumed too, before the last sample.
	for s.depth(orders.Name())+s.depth(rpc.Name()) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond) // polling the broker: nothing to await
	}
	s.take(app, start)
	t0 := time.Now()
	ctx, cancelStop := context.WithTimeout(context.Background(), stopBound)
	stopErr := app.Stop(ctx)
	cancelStop()
	s.stopTook = time.Since(t0)
	stopped = true

	var errs []error
	if n := s.missing(); n > 0 {
		errs = append(errs, fmt.Errorf("lost %d messages whose publish returned nil (%s)", n, s.lost(10)))
	}
	if n := s.overlaps.Load(); n > 0 {
		errs = append(errs, fmt.Errorf("%d times a group was handled by two workers at once", n))
	}
	if n := s.late.Load(); n > 0 {
		errs = append(errs, fmt.Errorf("%d requests returned after their deadline", n))
	}
	if stopErr != nil && s.stopTook > stopBound+time.Second {
		errs = append(errs, fmt.Errorf("Stop took %v, past its bound %v: %w", s.stopTook, stopBound, stopErr))
	}
	if err := s.growth(); err != nil {
		errs = append(errs, err)
	}
	if err := s.goroutinesBack(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// handle records a delivery and checks that no other worker holds its
// group meanwhile.
func (s *soak) handle(_ context.Context, m *amqpactor.Message) error {
	s.mu.Lock()
	if s.busy[m.GroupID] {
		s.overlaps.Add(1)
	}
	s.busy[m.GroupID] = true
	s.mu.Unlock()
	time.Sleep(time.Duration(len(m.Body)%3) * 100 * time.Microsecond) // the handler's own work
	var p, i int
	if _, err := fmt.Sscanf(string(m.Body), "p%d-%d", &p, &i); err != nil || p < 0 || p >= publishers || i < 0 {
		return fmt.Errorf("soak: a message of nobody's: %q", m.Body)
	}
	s.mu.Lock()
	s.busy[m.GroupID] = false
	for len(s.handled[p]) <= i {
		s.handled[p] = append(s.handled[p], 0)
	}
	s.handled[p][i]++
	s.mu.Unlock()
	return nil
}

func (s *soak) publish(ctx context.Context, app *amqpactor.App, q amqpactor.Address, p int) {
	for i := 0; ctx.Err() == nil; i++ {
		id := fmt.Sprintf("p%d-%d", p, i)
		for ctx.Err() == nil {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := app.Publish(pctx, q, &amqpactor.Message{Body: []byte(id), GroupID: fmt.Sprintf("g%d", (p*7919+i)%groups)})
			cancel()
			if err == nil {
				s.mu.Lock()
				s.sent[p] = i + 1
				s.sentAt[p] = append(s.sentAt[p], uint32(time.Since(s.start).Milliseconds()))
				s.mu.Unlock()
				s.published.Add(1)
				break
			}
			// A publish that failed is not counted as published; it is
			// tried again (a copy may then arrive twice: a duplicate).
			s.publishErrors.Add(1)
			time.Sleep(50 * time.Millisecond) // a pause before retrying, not synchronisation
		}
		time.Sleep(publishEvery)
	}
}

func (s *soak) request(ctx context.Context, app *amqpactor.App, q amqpactor.Address) {
	for i := 0; ctx.Err() == nil; i++ {
		rctx, cancel := context.WithTimeout(context.Background(), requestBound)
		dl, _ := rctx.Deadline()
		_, err := app.Request(rctx, q, &amqpactor.Message{Body: []byte(strconv.Itoa(i))})
		cancel()
		s.requests.Add(1)
		if err != nil {
			s.requestErrors.Add(1)
		}
		if time.Now().After(dl.Add(time.Second)) {
			s.late.Add(1)
		}
		time.Sleep(requestEvery)
	}
}

// inject runs the schedule of faults until runFor has passed, sampling on
// the way.
func (s *soak) inject(rng *rand.Rand, app *amqpactor.App, start time.Time) {
	nextSample := start.Add(s.sampleEvery)
	lastRestart := start
	for time.Since(start) < s.runFor {
		wait := time.Duration(8+rng.IntN(12)) * time.Second
		for end := time.Now().Add(wait); time.Now().Before(end) && time.Since(start) < s.runFor; {
			time.Sleep(200 * time.Millisecond) // the gap between faults itself
			if time.Now().After(nextSample) {
				s.take(app, start)
				nextSample = nextSample.Add(s.sampleEvery)
			}
		}
		if time.Since(start) >= s.runFor {
			return
		}
		kinds := []string{"cut", "cut", "blackhole", "latency", "restart"}
		if len(s.nodes) > 0 {
			// A node kill in place of the restart, and more often: it is
			// what cluster mode is for.
			kinds = []string{"cut", "cut", "blackhole", "latency", "kill", "kill"}
		}
		kind := kinds[rng.IntN(len(kinds))]
		if len(s.nodes) > 0 && s.kills && s.faults["kill"] == 0 && time.Since(start) > s.runFor/2 {
			// A short run (make test's two minutes) kills a node at least
			// once, whatever the draw.
			kind = "kill"
		}
		if kind == "restart" && (!s.restarts || time.Since(lastRestart) < 50*time.Second) {
			kind = "cut"
		}
		if kind == "kill" && !s.kills {
			kind = "cut"
		}
		at := time.Since(start).Round(time.Second)
		switch kind {
		case "cut":
			n := 0
			for _, p := range s.proxies {
				n += p.Cut()
			}
			s.note(fmt.Sprintf("%v cut (%d connections)", at, n), kind)
		case "blackhole":
			d := time.Duration(3+rng.IntN(5)) * time.Second
			s.eachProxy(func(p *testproxy.Proxy) { p.BlackHole(true) })
			time.Sleep(d) // the fault's length
			s.eachProxy(func(p *testproxy.Proxy) { p.BlackHole(false) })
			s.note(fmt.Sprintf("%v black hole %v", at, d), kind)
		case "latency":
			d := time.Duration(5+rng.IntN(40)) * time.Millisecond
			s.eachProxy(func(p *testproxy.Proxy) { p.Latency(d) })
			time.Sleep(5 * time.Second) // the fault's length
			s.eachProxy(func(p *testproxy.Proxy) { p.Latency(0) })
			s.note(fmt.Sprintf("%v latency %v for 5s", at, d), kind)
		case "kill":
			// Mostly the node the App is on (a failover), else any (the
			// App's queues lose a replica under it).
			n, on := 1+rng.IntN(clusterctl.Nodes), s.attachedNode(app)
			if on > 0 && rng.IntN(3) > 0 {
				n = on
			}
			down := time.Duration(3+rng.IntN(10)) * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			err := clusterctl.Kill(ctx, s.script, n)
			if err == nil {
				time.Sleep(down) // the node stays down this long, traffic running
				err = clusterctl.Restart(ctx, s.script, n)
			}
			cancel()
			if err != nil {
				// A node that did not come back: killing another would
				// take the cluster's quorum, which is no fault of the App's.
				s.kills = false
			}
			s.note(fmt.Sprintf("%v node %d killed (the App on node %d), restarted after %v (%v)", at, n, on, down, err), kind)
		case "restart":
			lastRestart = time.Now()
			err := s.brokerCtl("stop_app")
			if err == nil {
				err = s.brokerCtl("start_app")
			}
			if err == nil {
				err = s.brokerCtl("await_startup")
			}
			s.note(fmt.Sprintf("%v broker restart (%v)", at, err), kind)
		}
	}
}

func (s *soak) eachProxy(f func(*testproxy.Proxy)) {
	for _, p := range s.proxies {
		f(p)
	}
}

// attachedNode is the node (1..3) the App's connection is attached to, by
// the proxy its tree names; 0 when it is not attached or not in cluster
// mode.
func (s *soak) attachedNode(app *amqpactor.App) int {
	if len(s.nodes) == 0 || app == nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tree, err := app.Tree(ctx)
	if err != nil || tree.State != "attached" {
		return 0
	}
	u, err := url.Parse(tree.Address)
	if err != nil {
		return 0
	}
	for i, p := range s.proxies {
		if p.Addr() == u.Host {
			return i + 1
		}
	}
	return 0
}

func (s *soak) note(what, kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.schedule = append(s.schedule, what)
	s.faults[kind]++
}

func (s *soak) brokerCtl(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", append([]string{s.script, "ctl"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s ctl %s: %w: %s", s.script, strings.Join(args, " "), err, out)
	}
	return nil
}

// take samples the heap, goroutines, the App's connections and the queue
// depths; app may be nil (the connections are then not counted).
func (s *soak) take(app *amqpactor.App, start time.Time) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	sm := sample{at: time.Since(start).Round(time.Second), heapMiB: float64(ms.HeapInuse) / (1 << 20), goroutines: runtime.NumGoroutine()}
	if app != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if tree, err := app.Tree(ctx); err == nil && tree.State == "attached" {
			sm.connections = 1
		}
		cancel()
		sm.node = s.attachedNode(app)
	}
	s.mgmt(func(ctx context.Context, m *amqpwire.Management) {
		tag := strconv.FormatUint(s.seed%1_000_000, 36)
		if info, err := m.QueueInfo(ctx, "soak."+tag+".orders"); err == nil {
			sm.ordersDepth = info.Messages
		}
		if info, err := m.QueueInfo(ctx, "soak."+tag+".rpc"); err == nil {
			sm.rpcDep = info.Messages
		}
	})
	s.mu.Lock()
	s.samples = append(s.samples, sm)
	s.mu.Unlock()
}

// growth fails when the heap or the goroutines grew without bound: the last
// sample well past the first after the start.
func (s *soak) growth() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) < 2 {
		return nil
	}
	first, last := s.samples[0], s.samples[len(s.samples)-1]
	var errs []error
	if last.heapMiB > 2*first.heapMiB+64 {
		errs = append(errs, fmt.Errorf("heap grew from %.1f to %.1f MiB", first.heapMiB, last.heapMiB))
	}
	if last.goroutines > 2*first.goroutines+100 {
		errs = append(errs, fmt.Errorf("goroutines grew from %d to %d", first.goroutines, last.goroutines))
	}
	if last.ordersDepth > 0 || last.rpcDep > 0 {
		errs = append(errs, fmt.Errorf("queues not drained at the end: orders %d, rpc %d", last.ordersDepth, last.rpcDep))
	}
	return errors.Join(errs...)
}

// goroutinesBack waits, bounded, for the goroutines of the App to end.
func (s *soak) goroutinesBack() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= s.goroutinesBefore+2 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d goroutines after Stop, %d before Start", n, s.goroutinesBefore)
		}
		time.Sleep(100 * time.Millisecond) // polling a count: nothing to await
	}
}

// depth is queue's message count (0 when it cannot be read).
func (s *soak) depth(queue string) uint64 {
	var n uint64
	s.mgmt(func(ctx context.Context, m *amqpwire.Management) {
		if info, err := m.QueueInfo(ctx, queue); err == nil {
			n = info.Messages
		}
	})
	return n
}

func (s *soak) missing() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for p, sent := range s.sent {
		for i := range sent {
			if i >= len(s.handled[p]) || s.handled[p][i] == 0 {
				n++
			}
		}
	}
	return n
}

// lost names up to n of the missing messages and when their publish
// returned.
func (s *soak) lost(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for p, sent := range s.sent {
		for i := range sent {
			if (i >= len(s.handled[p]) || s.handled[p][i] == 0) && len(out) < n {
				out = append(out, fmt.Sprintf("p%d-%d published at %v", p, i, time.Duration(s.sentAt[p][i])*time.Millisecond))
			}
		}
	}
	return strings.Join(out, ", ")
}

func (s *soak) duplicates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, counts := range s.handled {
		for _, c := range counts {
			n += max(int(c)-1, 0)
		}
	}
	return n
}

func (s *soak) mgmt(f func(ctx context.Context, m *amqpwire.Management)) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(s.nodes) > 0 {
		// Straight to the first node that answers, not through the proxies.
		_ = clusterctl.Management(ctx, s.nodes, f)
		return
	}
	c, err := amqpwire.New(amqpwire.Config{URL: s.url, Dialect: amqpactor.RabbitMQ4}).Connect(ctx)
	if err != nil {
		return
	}
	defer func() { _ = c.Close(ctx) }()
	f(ctx, c.(*amqpwire.Conn).Management())
}

func (s *soak) deleteQueues(names ...string) {
	s.mgmt(func(ctx context.Context, m *amqpwire.Management) {
		for _, n := range names {
			_ = brokeradmin.DeleteQueue(ctx, m, n)
		}
	})
}

func (s *soak) report() string {
	s.mu.Lock()
	samples := append([]sample(nil), s.samples...)
	schedule := strings.Join(s.schedule, "; ")
	faults := fmt.Sprintf("cut=%d blackhole=%d latency=%d restart=%d kill=%d", s.faults["cut"], s.faults["blackhole"], s.faults["latency"], s.faults["restart"], s.faults["kill"])
	s.mu.Unlock()
	var b strings.Builder
	mode := "single"
	if len(s.nodes) > 0 {
		mode = "cluster"
	}
	fmt.Fprintf(&b, "SOAK mode=%s seed=%d for=%v published=%d publish_errors_retried=%d lost=%d duplicates=%d requests=%d request_errors=%d requests_late=%d overlaps=%d stop=%v faults: %s\n",
		mode, s.seed, s.runFor, s.published.Load(), s.publishErrors.Load(), s.missing(), s.duplicates(), s.requests.Load(),
		s.requestErrors.Load(), s.late.Load(), s.overlaps.Load(), s.stopTook.Round(time.Millisecond), faults)
	fmt.Fprintf(&b, "schedule: %s\n", schedule)
	fmt.Fprintf(&b, "%8s %10s %10s %11s %12s %9s %5s\n", "at", "heap MiB", "goroutines", "connections", "orders depth", "rpc depth", "node")
	for _, sm := range samples {
		conns, node := "-", "-"
		if sm.connections > 0 {
			conns = strconv.Itoa(sm.connections)
		}
		if sm.node > 0 {
			node = strconv.Itoa(sm.node)
		}
		fmt.Fprintf(&b, "%8v %10.1f %10d %11s %12d %9d %5s\n", sm.at, sm.heapMiB, sm.goroutines, conns, sm.ordersDepth, sm.rpcDep, node)
	}
	return b.String()
}
