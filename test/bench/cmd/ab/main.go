// Command ab runs amqpactor against raw go-amqp in one invocation, in
// alternating A/B rounds on the same broker, queue types, body sizes, credit
// and in-flight window, and prints markdown tables:
//
//   - live (RabbitMQ 4, -url or $AMQP_URL): end-to-end at-least-once
//     throughput and request/reply latency, amqpactor vs raw go-amqp, per
//     queue type and body size: medians with ranges, the ratio of the
//     medians, the paired ratio (median of the per-round ratios) and the
//     goal (throughput >= 1.0 x raw, request/reply p50 <= 1.05 x raw and
//     client CPU per round trip <= 1.1 x raw);
//   - in-process broker end to end, per partition count;
//   - memory: a backlog drained by a slow handler, peak heap per credit;
//   - allocation micro-benchmarks of the hot paths;
//   - with -frames, instead of all of the above: frames by performative and
//     bytes per message, both directions, of the live throughput scenario
//     run through a frame-parsing loopback proxy (package framecount), at
//     one PublishAsync goroutine and at -frame-publishers publishers;
//   - with -cpuprofile DIR, besides the tables: a CPU profile of the
//     measured part of every live run, which test/bench/cpusplit.sh splits
//     into go-amqp, the garbage collector, the scheduler, socket writes and
//     the rest.
//
// Usage:
//
//	bash test/broker/rabbitmq4.sh start
//	AMQP_URL=$(bash test/broker/rabbitmq4.sh url) go run ./test/bench/cmd/ab [flags]
//
// In every round each pair runs back to back, amqpactor first in odd rounds
// and raw go-amqp first in even ones, so both sides see the same machine
// conditions. The scenarios are those of package scenario (see its
// documentation and docs/BENCHMARKS.md). Progress goes to stderr, the tables
// to stdout. Without a broker URL the live parts are skipped (said loudly on
// stderr) and the rest still runs. The exit status is non-zero when a run
// fails, never because a goal is missed: benchmarks report, they do not
// assert.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor/test/bench/scenario"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// runTimeout bounds every single run.
const runTimeout = 10 * time.Minute

// inprocPublishers is the number of parallel publishers of the in-process
// runs, as in BenchmarkInprocEndToEnd's partition cases.
const inprocPublishers = 64

type config struct {
	rounds, n, rpc   int
	queues           []scenario.QueueType
	sizes            []int
	credit, window   int
	inproc           []int
	inprocN          int
	backlog          []int
	micro            bool
	frames           bool
	framePublishers  []int
	brokerPID        int
	cpuprofile       string
	url              string
	urlFromEnv       bool
	commandLine      string
	startLoad        string
	start            time.Time
	brokerVersion    string
	brokerVersionErr error
}

func main() { os.Exit(run(os.Args, os.Stdout, os.Stderr)) }

// run runs the program with the command line argv and returns its exit
// status.
func run(argv []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(argv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "ab:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := &runner{cfg: cfg, log: stderr, live: map[liveKey]*pair{}, inproc: map[int][]*scenario.Result{}, frames: map[frameKey]*frameRow{}}
	r.all(ctx)
	if ctx.Err() != nil {
		r.fail("ab", errors.New("interrupted: the remaining runs were skipped"))
	}
	r.print(stdout)
	if len(r.failures) > 0 {
		fmt.Fprintf(stderr, "ab: %d run(s) FAILED:\n", len(r.failures))
		for _, f := range r.failures {
			fmt.Fprintln(stderr, "  "+f)
		}
		return 1
	}
	return 0
}

func parseFlags(argv []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("ab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := &config{}
	fs.IntVar(&cfg.rounds, "rounds", 3, "A/B rounds of every live pair and runs of every in-process case")
	fs.IntVar(&cfg.n, "n", 20000, "messages per live throughput run")
	fs.IntVar(&cfg.rpc, "rpc", 2000, "round trips per live request/reply run")
	queues := fs.String("queues", "quorum,classic", "comma-separated queue types of the live runs (quorum, classic)")
	sizes := fs.String("sizes", "100,4096", "comma-separated body sizes in bytes of the live runs")
	fs.IntVar(&cfg.credit, "credit", scenario.DefaultCredit, "receiver link credit, both sides (and of the in-process subscription)")
	fs.IntVar(&cfg.window, "window", scenario.DefaultWindow, "publishes awaiting their outcome at once in a throughput run, both sides")
	inproc := fs.String("inproc", "1,4,16", "comma-separated partition counts of the in-process runs; empty disables them")
	fs.IntVar(&cfg.inprocN, "inproc-n", 300000, "messages per in-process run")
	backlog := fs.String("backlog", "64,256,1024", "comma-separated credits of the backlog memory runs; empty disables them")
	fs.BoolVar(&cfg.micro, "micro", true, "run the allocation micro-benchmarks")
	fs.BoolVar(&cfg.frames, "frames", false, "run only the frames-per-message table: the throughput scenario of both sides through a frame-parsing proxy")
	framePubs := fs.String("frame-publishers", "64,256", "with -frames: comma-separated publisher counts (and raw windows) besides the one-goroutine PublishAsync case")
	fs.IntVar(&cfg.brokerPID, "broker-pid", 0, "with -frames: the broker's process id, to report its CPU time per message (0: not measured)")
	fs.StringVar(&cfg.cpuprofile, "cpuprofile", "", "write a CPU profile of the measured part of every live run into this directory, one file per run (test/bench/cpusplit.sh says where its time went)")
	fs.StringVar(&cfg.url, "url", "", "RabbitMQ 4 broker URL (default $AMQP_URL); none skips the live parts")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: go run ./test/bench/cmd/ab [flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(argv[1:]); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.url == "" {
		cfg.url, cfg.urlFromEnv = os.Getenv("AMQP_URL"), true
	}
	for name, v := range map[string]int{"rounds": cfg.rounds, "n": cfg.n, "rpc": cfg.rpc, "credit": cfg.credit, "window": cfg.window, "inproc-n": cfg.inprocN} {
		if v <= 0 {
			return nil, fmt.Errorf("-%s must be positive, not %d", name, v)
		}
	}
	for _, s := range splitList(*queues) {
		q, err := scenario.ParseQueueType(s)
		if err != nil {
			return nil, fmt.Errorf("-queues: %w", err)
		}
		cfg.queues = append(cfg.queues, q)
	}
	var err error
	if cfg.sizes, err = positiveInts("sizes", *sizes); err != nil {
		return nil, err
	}
	if cfg.inproc, err = positiveInts("inproc", *inproc); err != nil {
		return nil, err
	}
	if cfg.backlog, err = positiveInts("backlog", *backlog); err != nil {
		return nil, err
	}
	if cfg.framePublishers, err = positiveInts("frame-publishers", *framePubs); err != nil {
		return nil, err
	}
	cfg.commandLine = commandLine(argv)
	return cfg, nil
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func positiveInts(name, s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		v, err := strconv.Atoi(f)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("-%s: %q is not a positive integer", name, f)
		}
		out = append(out, v)
	}
	return out, nil
}

// commandLine is the command as typed, the program by its base name and
// any password in a URL redacted.
func commandLine(argv []string) string {
	parts := []string{filepath.Base(argv[0])}
	for _, a := range argv[1:] {
		parts = append(parts, shellQuote(redactURL(a)))
	}
	return strings.Join(parts, " ")
}

// redactURL hides the password of a URL in a (e.g. -url=amqp://u:p@h/).
func redactURL(a string) string {
	i := strings.Index(a, "://")
	if i < 0 {
		return a
	}
	start := strings.LastIndex(a[:i], "=") + 1
	u, err := url.Parse(a[start:])
	if err != nil {
		return a[:start] + "(unparsable URL)"
	}
	return a[:start] + u.Redacted()
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=+.,:/@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// The two sides of a live pair.
type side int

const (
	actor side = iota
	raw
)

var sideNames = [2]string{"amqpactor", "raw-go-amqp"}

type liveKey struct {
	scenario string // "throughput" or "request/reply"
	queue    scenario.QueueType
	body     int
}

// pair holds one result per round and side; nil where the run failed.
type pair struct{ res [2][]*scenario.Result }

type liveFunc func(context.Context, scenario.Params, *amqpwire.Management) (scenario.Result, error)

type runner struct {
	cfg      *config
	log      io.Writer
	live     map[liveKey]*pair
	order    []liveKey
	inproc   map[int][]*scenario.Result
	backlog  []scenario.BacklogResult
	micro    []microResult
	failures []string
	endLoad  string

	frames     map[frameKey]*frameRow
	frameOrder []frameKey
}

type microResult struct {
	name string
	res  testing.BenchmarkResult
}

func (r *runner) progress(format string, args ...any) {
	fmt.Fprintf(r.log, "ab: "+format+"\n", args...)
}

func (r *runner) fail(what string, err error) {
	msg := fmt.Sprintf("%s: %v", what, err)
	r.failures = append(r.failures, msg)
	r.progress("FAILED %s", msg)
}

func (r *runner) all(ctx context.Context) {
	c := r.cfg
	c.start = time.Now()
	c.startLoad = loadAverage()
	if c.frames {
		if c.url == "" {
			r.fail("frames", errors.New("-frames needs a broker (-url or $AMQP_URL)"))
		} else {
			r.frameRuns(ctx)
		}
		r.endLoad = loadAverage()
		return
	}
	if c.url == "" {
		fmt.Fprintln(r.log, "ab: ******************************************************************")
		fmt.Fprintln(r.log, "ab: NO BROKER URL (-url or AMQP_URL): SKIPPING ALL LIVE RabbitMQ 4 RUNS")
		fmt.Fprintln(r.log, "ab: (throughput, request/reply, backlog memory). Start the test broker:")
		fmt.Fprintln(r.log, "ab:   bash test/broker/rabbitmq4.sh start")
		fmt.Fprintln(r.log, "ab:   export AMQP_URL=$(bash test/broker/rabbitmq4.sh url)")
		fmt.Fprintln(r.log, "ab: ******************************************************************")
	} else {
		r.liveRuns(ctx)
	}
	r.inprocRuns(ctx)
	if c.url != "" {
		r.backlogRuns(ctx)
	}
	r.microRuns(ctx)
	r.endLoad = loadAverage()
}

func (r *runner) liveRuns(ctx context.Context) {
	c := r.cfg
	c.brokerVersion, c.brokerVersionErr = scenario.BrokerVersion(ctx, c.url)
	m, closeAdmin, ok := r.admin(ctx, "live runs")
	if !ok {
		return
	}
	defer closeAdmin()
	kinds := []struct {
		name  string
		n     int
		funcs [2]liveFunc
	}{
		{"throughput", c.n, [2]liveFunc{scenario.ThroughputActor, scenario.ThroughputRaw}},
		// One goroutine with PublishAsync against raw go-amqp's window.
		{"throughput async", c.n, [2]liveFunc{scenario.ThroughputActorAsync, scenario.ThroughputRaw}},
		{"request/reply", c.rpc, [2]liveFunc{scenario.RequestActor, scenario.RequestRaw}},
	}
	for round := range c.rounds {
		first := side(round % 2) // amqpactor first in odd rounds (1, 3, ...), raw first in even ones
		for _, k := range kinds {
			for _, q := range c.queues {
				for _, body := range c.sizes {
					key := liveKey{k.name, q, body}
					p := r.live[key]
					if p == nil {
						p = &pair{res: [2][]*scenario.Result{make([]*scenario.Result, c.rounds), make([]*scenario.Result, c.rounds)}}
						r.live[key] = p
						r.order = append(r.order, key)
					}
					for _, s := range []side{first, 1 - first} {
						if ctx.Err() != nil {
							return
						}
						what := fmt.Sprintf("round %d/%d %s %s %s %s", round+1, c.rounds, k.name, q, bodyString(body), sideNames[s])
						params := scenario.Params{URL: c.url, Queue: q, Body: body, Credit: c.credit, Window: c.window, N: k.n}
						if c.cpuprofile != "" {
							params.OnStart, params.OnStop = r.profile(what, fmt.Sprintf("%s-%s-%s-%s-r%d.pprof",
								k.name, q, bodyString(body), sideNames[s], round+1))
						}
						runtime.GC() // as go test does before every run: neither side pays for the other's garbage
						rctx, cancel := context.WithTimeout(ctx, runTimeout)
						res, err := k.funcs[s](rctx, params, m)
						cancel()
						if err != nil {
							r.fail(what, err)
							continue
						}
						p.res[s][round] = &res
						r.progress("%s: %s", what, summary(k.name, res))
					}
				}
			}
		}
	}
}

// profile returns the OnStart and OnStop of a run whose CPU profile goes
// to the file name (made safe for a path) in the -cpuprofile directory.
func (r *runner) profile(what, name string) (start, stop func()) {
	name = strings.Map(func(c rune) rune {
		if c == '.' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			return c
		}
		return '-'
	}, name)
	var f *os.File
	start = func() {
		var err error
		if err = os.MkdirAll(r.cfg.cpuprofile, 0o755); err == nil {
			f, err = os.Create(filepath.Join(r.cfg.cpuprofile, name))
		}
		if err == nil {
			if err = pprof.StartCPUProfile(f); err != nil {
				_ = f.Close()
			}
		}
		if err != nil {
			f = nil
			r.fail(what+": cpu profile", err)
		}
	}
	stop = func() {
		if f == nil {
			return
		}
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			r.fail(what+": cpu profile", err)
		}
	}
	return start, stop
}

func summary(kind string, res scenario.Result) string {
	s := ""
	if strings.HasPrefix(kind, "throughput") {
		s = fmt.Sprintf("%s msg/s", num(res.Rate()))
	} else {
		s = fmt.Sprintf("p50 %s µs, p99 %s µs", num(micros(res.Percentile(0.50))), num(micros(res.Percentile(0.99))))
	}
	if res.CPUOK {
		s += fmt.Sprintf(", %s cpu-µs/op", num(micros(res.CPUPerOp())))
	}
	return s + fmt.Sprintf(", %s allocs/op, %s B/op (%d ops in %s)",
		num(res.AllocsPerOp()), num(res.BytesPerOp()), res.N, res.Elapsed.Round(time.Millisecond))
}

func (r *runner) inprocRuns(ctx context.Context) {
	c := r.cfg
	for round := range c.rounds {
		for _, parts := range c.inproc {
			if ctx.Err() != nil {
				return
			}
			what := fmt.Sprintf("round %d/%d in-process partitions=%d", round+1, c.rounds, parts)
			runtime.GC()
			rctx, cancel := context.WithTimeout(ctx, runTimeout)
			res, err := scenario.InprocThroughput(rctx, scenario.InprocParams{
				Publishers: inprocPublishers, Partitions: parts, Credit: c.credit, N: c.inprocN,
			})
			cancel()
			if err != nil {
				r.fail(what, err)
				continue
			}
			r.inproc[parts] = append(r.inproc[parts], &res)
			r.progress("%s: %s", what, summary("throughput", res))
		}
	}
}

// admin opens the connection the runs declare, check and delete their
// queues through; a failure is reported as what's.
func (r *runner) admin(ctx context.Context, what string) (m *amqpwire.Management, done func(), ok bool) {
	conn, err := scenario.Admin(ctx, r.cfg.url)
	if err != nil {
		r.fail(what, err)
		return nil, nil, false
	}
	return conn.Management(), func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}, true
}

func (r *runner) backlogRuns(ctx context.Context) {
	c := r.cfg
	if len(c.backlog) == 0 {
		return
	}
	m, closeAdmin, ok := r.admin(ctx, "backlog runs")
	if !ok {
		return
	}
	defer closeAdmin()
	for _, credit := range c.backlog {
		if ctx.Err() != nil {
			return
		}
		what := fmt.Sprintf("backlog credit=%d", credit)
		r.progress("%s: filling the queue", what)
		runtime.GC()
		rctx, cancel := context.WithTimeout(ctx, runTimeout)
		res, err := scenario.Backlog(rctx, scenario.BacklogParams{URL: c.url, Credit: credit}, m)
		cancel()
		if err != nil {
			r.fail(what, err)
			continue
		}
		r.backlog = append(r.backlog, res)
		r.progress("%s: peak heap %.1f MiB, growth %.1f MiB (%d handled in %s)",
			what, mib(res.PeakHeap), mib(res.Growth()), res.Handled, res.Elapsed.Round(time.Millisecond))
	}
}

func (r *runner) microRuns(ctx context.Context) {
	if !r.cfg.micro {
		return
	}
	for _, mb := range scenario.MicroBenchmarks() {
		if ctx.Err() != nil {
			return
		}
		res := testing.Benchmark(mb.F)
		if res.N == 0 {
			r.fail("micro "+mb.Name, errors.New("the benchmark failed"))
			continue
		}
		r.micro = append(r.micro, microResult{mb.Name, res})
		r.progress("micro %s: %d ns/op, %d B/op, %d allocs/op", mb.Name, res.NsPerOp(), res.AllocedBytesPerOp(), res.AllocsPerOp())
	}
}

// ---- output ----

type metric struct {
	name string
	get  func(scenario.Result) (float64, bool)
	// goal, when set: the ratio amqpactor / raw must be >= (atLeast) or
	// <= ratio.
	goal    bool
	atLeast bool
	ratio   float64
}

var (
	cpuMetric = metric{name: "cpu-µs/op", get: func(r scenario.Result) (float64, bool) {
		return micros(r.CPUPerOp()), r.CPUOK
	}}
	allocsMetric = metric{name: "allocs/op", get: func(r scenario.Result) (float64, bool) { return r.AllocsPerOp(), true }}
	bytesMetric  = metric{name: "B/op", get: func(r scenario.Result) (float64, bool) { return r.BytesPerOp(), true }}
	metrics      = map[string][]metric{
		"throughput": {
			{name: "msg/s", get: func(r scenario.Result) (float64, bool) { return r.Rate(), true }, goal: true, atLeast: true, ratio: 1.0},
			cpuMetric, allocsMetric, bytesMetric,
		},
		"throughput async": {
			{name: "msg/s", get: func(r scenario.Result) (float64, bool) { return r.Rate(), true }, goal: true, atLeast: true, ratio: 1.0},
			cpuMetric, allocsMetric, bytesMetric,
		},
		"request/reply": {
			{name: "p50-µs", get: func(r scenario.Result) (float64, bool) { return micros(r.Percentile(0.50)), true }, goal: true, ratio: 1.05},
			{name: "p99-µs", get: func(r scenario.Result) (float64, bool) { return micros(r.Percentile(0.99)), true }},
			metric{name: cpuMetric.name, get: cpuMetric.get, goal: true, ratio: 1.1}, allocsMetric, bytesMetric,
		},
	}
)

func (r *runner) print(w io.Writer) {
	c := r.cfg
	fmt.Fprintln(w, "# amqpactor A/B benchmarks")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- date: %s\n", c.start.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "- go: %s %s/%s; GOMAXPROCS %d, NumCPU %d\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU())
	fmt.Fprintf(w, "- load average: %s at the start, %s at the end\n", c.startLoad, r.endLoad)
	switch {
	case c.url == "":
		fmt.Fprintln(w, "- broker: none (no -url or AMQP_URL): the live runs were SKIPPED")
	case c.brokerVersionErr != nil:
		fmt.Fprintf(w, "- broker: version unknown (%v)\n", c.brokerVersionErr)
	default:
		fmt.Fprintf(w, "- broker: %s\n", c.brokerVersion)
	}
	from := ""
	if c.url != "" && c.urlFromEnv {
		from = " (broker from $AMQP_URL)"
	}
	fmt.Fprintf(w, "- command: `%s`%s\n", c.commandLine, from)
	var qs, bs []string
	for _, q := range c.queues {
		qs = append(qs, string(q))
	}
	for _, b := range c.sizes {
		bs = append(bs, bodyString(b))
	}
	fmt.Fprintf(w, "- settings: %d round(s); live queues %s, bodies %s, credit %d; throughput %d messages per run, window %d; request/reply %d round trips per run\n",
		c.rounds, strings.Join(qs, ", "), strings.Join(bs, ", "), c.credit, c.n, c.window, c.rpc)

	r.printFrames(w)
	r.printLive(w)
	if !c.frames {
		r.printInproc(w)
		r.printBacklog(w)
		r.printMicro(w)
	}
	if len(r.failures) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "## FAILED runs (%d)\n\n", len(r.failures))
		for _, f := range r.failures {
			fmt.Fprintf(w, "- %s\n", f)
		}
	}
}

// table starts a section of the report: its heading, then the header and
// separator rows of a Markdown table of these columns.
func table(w io.Writer, heading string, columns ...string) {
	fmt.Fprintf(w, "\n## %s\n\n", heading)
	fmt.Fprintf(w, "| %s |\n", strings.Join(columns, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat(" --- |", len(columns)))
}

func (r *runner) printLive(w io.Writer) {
	if len(r.order) == 0 {
		return
	}
	table(w, "Live: amqpactor vs raw go-amqp",
		"scenario", "queue", "body", "metric", "amqpactor median (min..max)", "raw median (min..max)", "ratio of medians", "paired ratio", "goal")
	for _, key := range r.order {
		p := r.live[key]
		for _, m := range metrics[key.scenario] {
			var vals [2][]float64
			var byRound [2][]*float64
			for s := range 2 {
				byRound[s] = make([]*float64, len(p.res[s]))
				for i, res := range p.res[s] {
					if res == nil {
						continue
					}
					if v, ok := m.get(*res); ok {
						vals[s] = append(vals[s], v)
						byRound[s][i] = &v
					}
				}
			}
			if len(vals[actor]) == 0 && len(vals[raw]) == 0 {
				continue
			}
			ratio, paired, goal := "-", "-", ""
			if len(vals[actor]) > 0 && len(vals[raw]) > 0 {
				q := scenario.Median(vals[actor]) / scenario.Median(vals[raw])
				ratio = fmt.Sprintf("%.2f", q)
				if m.goal {
					goal = verdict(m, q)
				}
			}
			var per []float64
			for i := range byRound[actor] {
				if a, b := byRound[actor][i], byRound[raw][i]; a != nil && b != nil && *b != 0 {
					per = append(per, *a / *b)
				}
			}
			if len(per) > 0 {
				paired = fmt.Sprintf("%.2f", scenario.Median(per))
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
				key.scenario, key.queue, bodyString(key.body), m.name,
				spread(vals[actor]), spread(vals[raw]), ratio, paired, goal)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Medians over the rounds (min..max); ratio = amqpactor / raw go-amqp; paired = median of the")
	fmt.Fprintln(w, "per-round ratios (each pair ran back to back). Goals: throughput >= 1.0, request/reply p50 <= 1.05 and cpu-µs/op <= 1.1; the other")
	fmt.Fprintln(w, "rows are reported without a goal. cpu-µs/op, allocs/op and B/op are the whole client process.")
}

func verdict(m metric, q float64) string {
	met, op := q <= m.ratio, "≤"
	if m.atLeast {
		met, op = q >= m.ratio, "≥"
	}
	v := "met"
	if !met {
		v = "NOT MET"
	}
	return fmt.Sprintf("%s %g: %s", op, m.ratio, v)
}

func (r *runner) printInproc(w io.Writer) {
	if len(r.inproc) == 0 {
		return
	}
	table(w, fmt.Sprintf("In-process broker end to end (%d publishers, credit %d, %d messages per run, %d-byte bodies)",
		inprocPublishers, r.cfg.credit, r.cfg.inprocN, scenario.DefaultBody),
		"partitions", "msg/s median (min..max)", "allocs/op", "B/op")
	for _, parts := range r.cfg.inproc {
		rs := r.inproc[parts]
		if len(rs) == 0 {
			continue
		}
		var rate, allocs, bytes []float64
		for _, res := range rs {
			rate = append(rate, res.Rate())
			allocs = append(allocs, res.AllocsPerOp())
			bytes = append(bytes, res.BytesPerOp())
		}
		fmt.Fprintf(w, "| %d | %s | %s | %s |\n", parts, spread(rate), num(scenario.Median(allocs)), num(scenario.Median(bytes)))
	}
}

func (r *runner) printBacklog(w io.Writer) {
	if len(r.backlog) == 0 {
		return
	}
	b0 := r.backlog[0]
	table(w, fmt.Sprintf("Memory: a backlog of %s messages of 1 KiB on a quorum queue, drained by a slow handler (1 ms, 8 partitions) for 4 x credit deliveries", num(float64(b0.Backlog))),
		"credit", "peak heap MiB", "growth MiB", "growth per credit KiB")
	for _, res := range r.backlog {
		fmt.Fprintf(w, "| %d | %.1f | %.1f | %.1f |\n", res.Credit, mib(res.PeakHeap), mib(res.Growth()), res.GrowthPerCredit()/1024)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "If the heap followed the backlog rather than the credit, the peak would be about %s MiB whatever the credit.\n",
		num(float64(b0.Backlog)*1024/(1<<20)))
}

func (r *runner) printMicro(w io.Writer) {
	if !r.cfg.micro {
		return
	}
	table(w, "Allocation micro-benchmarks", "name", "ns/op", "B/op", "allocs/op")
	for _, m := range r.micro {
		fmt.Fprintf(w, "| %s | %s | %s | %d |\n", m.name, num(float64(m.res.T.Nanoseconds())/float64(m.res.N)),
			count(m.res.AllocedBytesPerOp()), m.res.AllocsPerOp())
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Note: %s.\n", scenario.DispatchNote)
}

// ---- numbers ----

// spread is the median and, with more than one value, the range.
func spread(v []float64) string {
	switch len(v) {
	case 0:
		return "-"
	case 1:
		return num(v[0])
	}
	return fmt.Sprintf("%s (%s..%s)", num(scenario.Median(v)), num(slices.Min(v)), num(slices.Max(v)))
}

// num prints v with thousands separators from 1,000, one decimal from 10,
// two below.
func num(v float64) string {
	switch {
	case math.Round(v) >= 1000:
		s := strconv.FormatFloat(v, 'f', 0, 64)
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		return b.String()
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// count prints a whole number, with thousands separators from 1,000.
func count(n int64) string {
	if n < 1000 {
		return strconv.FormatInt(n, 10)
	}
	return num(float64(n))
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func bodyString(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d B", n)
}

// loadAverage is the 1, 5 and 15 minute load averages, where the system
// tells them.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
