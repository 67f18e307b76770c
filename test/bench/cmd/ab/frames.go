package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/amqpactor/amqpactor/test/bench/framecount"
	"github.com/amqpactor/amqpactor/test/bench/scenario"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// The -frames mode runs the live throughput scenario of both sides through
// a loopback proxy that parses AMQP frames in both directions, and reports
// frames by performative and bytes per message: how much each side makes
// the broker parse, which no timing shows.

// frameCase is one row pair of the frames table.
type frameCase struct {
	name  string
	async bool // amqpactor: one goroutine with PublishAsync
	win   int  // publishers (amqpactor) and window (both)
}

func (c *config) frameCases() []frameCase {
	cases := []frameCase{{name: fmt.Sprintf("1 goroutine, %d outstanding", c.window), async: true, win: c.window}}
	for _, n := range c.framePublishers {
		cases = append(cases, frameCase{name: fmt.Sprintf("%d publishers", n), win: n})
	}
	return cases
}

type frameKey struct {
	c     frameCase
	queue scenario.QueueType
	body  int
}

// frameRun is one measured run: the tallies between the scenario's
// OnStart and OnStop, and the broker's CPU over the same interval.
type frameRun struct {
	res          scenario.Result
	up, down     framecount.Counts
	brokerCPU    time.Duration
	brokerCPUOK  bool
	unparsedSeen bool
}

type frameRow struct{ runs [2][]*frameRun } // per side, per round

func (r *runner) frameRuns(ctx context.Context) {
	c := r.cfg
	c.brokerVersion, c.brokerVersionErr = scenario.BrokerVersion(ctx, c.url)
	target, err := brokerHostPort(c.url)
	if err != nil {
		r.fail("frames", err)
		return
	}
	m, closeAdmin, ok := r.admin(ctx, "frames runs")
	if !ok {
		return
	}
	defer closeAdmin()
	for round := range c.rounds {
		first := side(round % 2)
		for _, fc := range c.frameCases() {
			for _, q := range c.queues {
				for _, body := range c.sizes {
					key := frameKey{fc, q, body}
					row := r.frames[key]
					if row == nil {
						row = &frameRow{}
						r.frames[key] = row
						r.frameOrder = append(r.frameOrder, key)
					}
					for _, s := range []side{first, 1 - first} {
						if ctx.Err() != nil {
							return
						}
						what := fmt.Sprintf("round %d/%d frames %s %s %s %s", round+1, c.rounds, fc.name, q, bodyString(body), sideNames[s])
						run, err := r.frameRun(ctx, m, target, fc, s, q, body)
						if err != nil {
							r.fail(what, err)
							continue
						}
						row.runs[s] = append(row.runs[s], run)
						n := float64(run.res.N)
						r.progress("%s: %s msg/s, client->broker %.3f frames/msg, broker->client %.3f frames/msg",
							what, num(run.res.Rate()), float64(run.up.Frames())/n, float64(run.down.Frames())/n)
					}
				}
			}
		}
	}
}

func (r *runner) frameRun(ctx context.Context, m *amqpwire.Management, target string, fc frameCase, s side, q scenario.QueueType, body int) (*frameRun, error) {
	c := r.cfg
	proxy, err := framecount.Listen(target)
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	purl, err := viaProxy(c.url, proxy.Addr())
	if err != nil {
		return nil, err
	}
	run := &frameRun{}
	var up0, down0 framecount.Counts
	var cpu0 time.Duration
	var cpu0OK bool
	params := scenario.Params{URL: purl, Queue: q, Body: body, Credit: c.credit, Window: fc.win, N: c.n,
		OnStart: func() {
			up0, down0 = proxy.Counts()
			cpu0, cpu0OK = processTicks(c.brokerPID)
		},
		OnStop: func() {
			up, down := proxy.Counts()
			run.up, run.down = up.Sub(up0), down.Sub(down0)
			cpu1, ok := processTicks(c.brokerPID)
			run.brokerCPU, run.brokerCPUOK = cpu1-cpu0, ok && cpu0OK
		},
	}
	f := scenario.ThroughputRaw
	if s == actor {
		f = scenario.ThroughputActor
		if fc.async {
			f = scenario.ThroughputActorAsync
		}
	}
	runtime.GC()
	rctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	if run.res, err = f(rctx, params, m); err != nil {
		return nil, err
	}
	if run.up.Unparsed > 0 || run.down.Unparsed > 0 {
		return nil, fmt.Errorf("the frame parser lost the stream (%d and %d bytes unparsed)", run.up.Unparsed, run.down.Unparsed)
	}
	return run, nil
}

// brokerHostPort is where the broker of an amqp:// URL listens.
func brokerHostPort(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("broker URL: %v", err)
	}
	if u.Scheme != "amqp" {
		return "", fmt.Errorf("-frames needs an amqp:// URL (the proxy parses plain AMQP), not %s://", u.Scheme)
	}
	port := u.Port()
	if port == "" {
		port = "5672"
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// viaProxy is raw with its host and port replaced by addr.
func viaProxy(raw, addr string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("broker URL: %v", err)
	}
	u.Host = addr
	return u.String(), nil
}

// processTicks is the CPU time (user + system) of process pid from
// /proc/PID/stat; false without a pid or a /proc.
func processTicks(pid int) (time.Duration, bool) {
	if pid <= 0 {
		return 0, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	// USER_HZ is 100 on every Linux this runs on (sysconf(_SC_CLK_TCK)).
	return time.Duration(ut+st) * 10 * time.Millisecond, true
}

// perMsg formats the kinds ks of counts per message.
func perMsg(cs []framecount.Counts, n int64, ks ...framecount.Kind) string {
	var v int64
	for _, c := range cs {
		for _, k := range ks {
			v += c.Units[k]
		}
	}
	return fmt.Sprintf("%.3f", float64(v)/float64(n))
}

func (r *runner) printFrames(w io.Writer) {
	if len(r.frameOrder) == 0 {
		return
	}
	table(w, "Frames per message: amqpactor vs raw go-amqp, through a frame-parsing proxy",
		"case", "queue", "body", "side", "c→b frames/msg", "transfer", "disposition", "flow", "other", "c→b B/msg", "b→c frames/msg", "transfer", "disposition", "flow", "other", "b→c B/msg", "msg/s median", "broker cpu-µs/msg median")
	main := []framecount.Kind{framecount.Transfer, framecount.Disposition, framecount.Flow}
	var other []framecount.Kind
	for _, k := range framecount.Kinds() {
		if k != framecount.Transfer && k != framecount.Disposition && k != framecount.Flow && k != framecount.Header {
			other = append(other, k)
		}
	}
	for _, key := range r.frameOrder {
		row := r.frames[key]
		var rates, cpus [2][]float64
		for s := range 2 {
			runs := row.runs[s]
			if len(runs) == 0 {
				continue
			}
			var ups, downs []framecount.Counts
			var n, upB, downB int64
			var upF, downF int64
			for _, run := range runs {
				ups, downs = append(ups, run.up), append(downs, run.down)
				n += int64(run.res.N)
				upB, downB = upB+run.up.Bytes, downB+run.down.Bytes
				upF, downF = upF+run.up.Frames(), downF+run.down.Frames()
				rates[s] = append(rates[s], run.res.Rate())
				if run.brokerCPUOK {
					cpus[s] = append(cpus[s], micros(run.brokerCPU)/float64(run.res.N))
				}
			}
			cells := []string{key.c.name, string(key.queue), bodyString(key.body), sideNames[s],
				fmt.Sprintf("**%.3f**", float64(upF)/float64(n))}
			for _, k := range main {
				cells = append(cells, perMsg(ups, n, k))
			}
			cells = append(cells, perMsg(ups, n, other...), num(float64(upB)/float64(n)), fmt.Sprintf("**%.3f**", float64(downF)/float64(n)))
			for _, k := range main {
				cells = append(cells, perMsg(downs, n, k))
			}
			cells = append(cells, perMsg(downs, n, other...), num(float64(downB)/float64(n)), spread(rates[s]), spread(cpus[s]))
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		}
		// Paired ratios: the runs of one round ran back to back.
		var pr, pc []float64
		for i := range min(len(row.runs[actor]), len(row.runs[raw])) {
			a, b := row.runs[actor][i], row.runs[raw][i]
			pr = append(pr, a.res.Rate()/b.res.Rate())
			if a.brokerCPUOK && b.brokerCPUOK && b.brokerCPU > 0 {
				pc = append(pc, (float64(a.brokerCPU)/float64(a.res.N))/(float64(b.brokerCPU)/float64(b.res.N)))
			}
		}
		if len(pr) > 0 {
			cpu := "-"
			if len(pc) > 0 {
				cpu = fmt.Sprintf("%.2f", scenario.Median(pc))
			}
			fmt.Fprintf(w, "| %s | %s | %s | paired ratio | | | | | | | | | | | | | %.2f | %s |\n",
				key.c.name, key.queue, bodyString(key.body), scenario.Median(pr), cpu)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Per message, summed over the rounds, between the start and the stop of each run's clock; c→b is")
	fmt.Fprintln(w, "what the client writes, b→c what the broker writes; other = every other performative and empty")
	fmt.Fprintln(w, "frames; protocol headers are not frames. '1 goroutine' is amqpactor's PublishAsync from one")
	fmt.Fprintln(w, "goroutine against raw go-amqp's one goroutine with the same window; 'N publishers' is N goroutines")
	fmt.Fprintln(w, "calling Publish against raw go-amqp's window N. Broker CPU is the beam process's user + system time")
	if r.cfg.brokerPID <= 0 {
		fmt.Fprintln(w, "(not measured: no -broker-pid). Paired ratio = median of amqpactor / raw per round.")
	} else {
		fmt.Fprintln(w, "(shared with whatever else uses the broker). Paired ratio = median of amqpactor / raw per round.")
	}
}
