// Command critpath reads a Go execution trace (go test -trace, or
// runtime/trace) and prints, for the system calls made under a chosen
// function (by default the socket writes of the coalescing writer and of
// go-amqp's connection writer), the chain of goroutine wake-ups that led to
// each: going back from the write, which goroutine woke the writer, which
// woke that one, and so on, until a goroutine that the network poller or a
// timer woke (the bytes that started it arriving). Chains that pass through
// the same places are grouped; for every hop it prints the median time the
// goroutine waited to run once woken and the median time it then ran
// before it woke the next one.
//
// It is how docs/BENCHMARKS.md splits a request/reply round trip into the
// hops of the runtime and those of raw go-amqp:
//
//	go test -c -o bench.test ./test/bench/
//	./bench.test -test.run '^$' -test.bench 'LiveRequestReply/amqpactor' -test.benchtime 2000x -test.trace rr.trace
//	cd test/bench/critpath && go run . ../../../rr.trace
//
// It is its own module so that the runtime does not depend on the trace
// reader (golang.org/x/exp/trace).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

func main() {
	sink := flag.String("sink", `coalesce\.\(\*Conn\)\.|go-amqp\.\(\*Conn\)\.connWriter`,
		"regular expression of a function on the stack of the system calls to explain")
	minShare := flag.Float64("min", 0.05, "print only the groups holding at least this share of the chains")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: critpath [-sink REGEXP] [-min SHARE] TRACE")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	re, err := regexp.Compile(*sink)
	if err != nil {
		fmt.Fprintln(os.Stderr, "critpath: -sink:", err)
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "critpath:", err)
		os.Exit(1)
	}
	defer f.Close()
	t, err := read(f, re)
	if err != nil {
		fmt.Fprintln(os.Stderr, "critpath:", err)
		os.Exit(1)
	}
	report(os.Stdout, t.groups(), *minShare)
}

// wake is a goroutine made runnable: when, by which goroutine
// (trace.NoGoroutine for the network poller or a timer), and where it was
// blocked.
type wake struct {
	at    trace.Time
	by    trace.GoID
	where string
}

// syscall is a system call of interest: which goroutine made it, when.
type syscall struct {
	g  trace.GoID
	at trace.Time
}

type timeline struct {
	wakes map[trace.GoID][]wake       // in time order
	runs  map[trace.GoID][]trace.Time // when it began to run, in time order
	calls []syscall
}

func read(r io.Reader, sink *regexp.Regexp) (*timeline, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, err
	}
	t := &timeline{wakes: map[trace.GoID][]wake{}, runs: map[trace.GoID][]trace.Time{}}
	blocked := map[trace.GoID]string{}
	for {
		ev, err := tr.ReadEvent()
		if err == io.EOF {
			return t, nil
		}
		if err != nil {
			return nil, err
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		g := st.Resource.Goroutine()
		from, to := st.Goroutine()
		switch {
		case to == trace.GoWaiting:
			blocked[g] = place(ev.Stack())
		case from == trace.GoWaiting && to == trace.GoRunnable:
			t.wakes[g] = append(t.wakes[g], wake{ev.Time(), ev.Goroutine(), blocked[g]})
		case from == trace.GoRunning && to == trace.GoSyscall:
			if onStack(ev.Stack(), sink) {
				t.calls = append(t.calls, syscall{g, ev.Time()})
			}
		}
		if to == trace.GoRunning {
			t.runs[g] = append(t.runs[g], ev.Time())
		}
	}
}

// place names where a goroutine blocked: the first two frames outside the
// runtime and the standard library's packages that block (sync, net, io),
// without the module paths of amqpactor and go-amqp.
func place(s trace.Stack) string {
	var out []string
	for f := range s.Frames() {
		fn := f.Func
		if skipped(fn) {
			continue
		}
		fn = strings.TrimPrefix(fn, "github.com/amqpactor/amqpactor/")
		fn = strings.TrimPrefix(fn, "github.com/Azure/")
		out = append(out, fn)
		if len(out) == 2 {
			break
		}
	}
	return strings.Join(out, " < ")
}

func skipped(fn string) bool {
	for _, p := range []string{"runtime.", "sync.", "internal/", "net.", "io.", "bufio.", "crypto/tls."} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

func onStack(s trace.Stack, re *regexp.Regexp) bool {
	for f := range s.Frames() {
		if re.MatchString(f.Func) {
			return true
		}
	}
	return false
}

// hop is one goroutine of a chain: how long it waited to run once woken,
// and how long it then ran until it woke the next one (or made the call).
type hop struct{ wait, ran float64 }

type group struct {
	places []string
	chains [][]hop
	totals []float64 // from the first wake to the call, µs
}

// maxHops bounds a chain: past it the walk stops where it is.
const maxHops = 32

// groups walks back from every call, skipping the first quarter of them
// (the warm-up of a benchmark), and groups the chains by their places.
func (t *timeline) groups() []*group {
	by := map[string]*group{}
	for _, c := range t.calls[len(t.calls)/4:] {
		var places []string
		var hops []hop
		g, at := c.g, c.at
		first := at
		for range maxHops {
			ws := t.wakes[g]
			i := sort.Search(len(ws), func(i int) bool { return ws[i].at > at }) - 1
			if i < 0 {
				break
			}
			w := ws[i]
			h := hop{}
			rs := t.runs[g]
			if j := sort.Search(len(rs), func(j int) bool { return rs[j] > w.at }); j < len(rs) && rs[j] <= at {
				h = hop{wait: µs(rs[j] - w.at), ran: µs(at - rs[j])}
			}
			places = append(places, w.where)
			hops = append(hops, h)
			first = w.at
			if w.by == trace.NoGoroutine {
				break
			}
			g, at = w.by, w.at
		}
		key := strings.Join(places, "\n")
		gr := by[key]
		if gr == nil {
			gr = &group{places: places}
			by[key] = gr
		}
		gr.chains = append(gr.chains, hops)
		gr.totals = append(gr.totals, µs(c.at-first))
	}
	out := make([]*group, 0, len(by))
	for _, g := range by {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i].chains) > len(out[j].chains) })
	return out
}

func µs(d trace.Time) float64 { return float64(d) / 1e3 }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func report(w io.Writer, groups []*group, minShare float64) {
	all := 0
	for _, g := range groups {
		all += len(g.chains)
	}
	for _, g := range groups {
		if all == 0 || float64(len(g.chains))/float64(all) < minShare {
			continue
		}
		fmt.Fprintf(w, "%d chains, median %.1f µs from the first wake-up to the call; from the call back:\n", len(g.chains), median(g.totals))
		for i, p := range g.places {
			var wait, ran []float64
			for _, c := range g.chains {
				wait, ran = append(wait, c[i].wait), append(ran, c[i].ran)
			}
			if p == "" {
				p = "(not blocked in a named place)"
			}
			fmt.Fprintf(w, "  waited %6.1f µs, ran %6.1f µs  %s\n", median(wait), median(ran), p)
		}
	}
}
