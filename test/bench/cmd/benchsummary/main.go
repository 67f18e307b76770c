// Command benchsummary reads `go test -bench` output (a file named as its
// argument, or stdin) and prints the table of docs/BENCHMARKS.md: for every
// benchmark with an "amqpactor" and a "raw-go-amqp" sub-benchmark, the
// median of each metric on both sides and their ratio amqpactor/raw, checked
// against this command's bounds (throughput >= 0.9, latency <= 1.2), and the
// in-process end-to-end rate against inprocTarget. The project's goals are
// in docs/BENCHMARKS.md, "Where each goal stands".
//
// It only reports: the exit status is 0 whether or not a goal is met, and
// non-zero only when the input cannot be read or holds no benchmark.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/amqpactor/amqpactor/test/bench/scenario"
)

const (
	actorSide = "amqpactor"
	rawSide   = "raw-go-amqp"
	// inprocTarget is the in-process end-to-end target on 2 cores.
	inprocTarget = 300_000
)

// goals says, per metric, how the ratio amqpactor/raw is judged; metrics
// without a goal are shown for information.
var goals = map[string]struct {
	atLeast bool
	ratio   float64
}{
	"msg/s":  {atLeast: true, ratio: 0.9},
	"p50-µs": {ratio: 1.2},
	"p99-µs": {ratio: 1.2},
}

// order is the order metrics are printed in; others follow alphabetically.
var order = []string{"msg/s", "p50-µs", "p99-µs", "ns/op", "cpu-µs/op", "B/op", "allocs/op"}

// procsSuffix is the -GOMAXPROCS suffix go test appends to every name.
var procsSuffix = regexp.MustCompile(`-\d+$`)

type samples map[string][]float64 // metric -> one value per run

func main() {
	in := io.Reader(os.Stdin)
	if len(os.Args) > 1 {
		f, err := os.Open(os.Args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchsummary:", err)
			os.Exit(1)
		}
		defer f.Close()
		in = f
	}
	results, names, err := parse(in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchsummary:", err)
		os.Exit(1)
	}
	if len(names) == 0 {
		fmt.Fprintln(os.Stderr, "benchsummary: no benchmark results in the input")
		os.Exit(1)
	}
	printPairs(os.Stdout, results, names)
	printInproc(os.Stdout, results, names)
}

// parse collects every result line: "BenchmarkX/y-2  N  v unit  v unit ...".
func parse(r io.Reader) (map[string]samples, []string, error) {
	results := map[string]samples{}
	var names []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue
		}
		name := procsSuffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), "")
		s, ok := results[name]
		if !ok {
			s = samples{}
			results[name] = s
			names = append(names, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			s[f[i+1]] = append(s[f[i+1]], v)
		}
	}
	return results, names, sc.Err()
}

// spread prints the median and, with more than one run, the range.
func spread(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	m := num(scenario.Median(v))
	if len(v) == 1 {
		return m
	}
	return fmt.Sprintf("%s (%s..%s, n=%d)", m, num(slices.Min(v)), num(slices.Max(v)), len(v))
}

// paired is the median of the ratios a[i]/r[i]: run.sh runs the two sides
// back to back, so each pair saw the same machine conditions.
func paired(a, r []float64) string {
	if len(a) != len(r) || len(a) < 2 {
		return "-"
	}
	q := make([]float64, len(a))
	for i := range a {
		q[i] = a[i] / r[i]
	}
	return fmt.Sprintf("%.2f", scenario.Median(q))
}

func num(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func metrics(a, b samples) []string {
	var out []string
	for _, m := range order {
		if len(a[m]) > 0 && len(b[m]) > 0 {
			out = append(out, m)
		}
	}
	var rest []string
	for m := range a {
		if len(b[m]) > 0 && !slices.Contains(order, m) && m != "procs" && m != "MB/s" {
			rest = append(rest, m)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

func printPairs(w io.Writer, results map[string]samples, names []string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tmetric\tamqpactor\traw-go-amqp\tratio\tpaired\tgoal\t")
	found := false
	for _, name := range names {
		base, ok := strings.CutSuffix(name, "/"+actorSide)
		if !ok {
			continue
		}
		a, r := results[name], results[base+"/"+rawSide]
		if r == nil {
			continue
		}
		found = true
		for _, m := range metrics(a, r) {
			ratio := scenario.Median(a[m]) / scenario.Median(r[m])
			goal := ""
			if g, ok := goals[m]; ok {
				met := ratio <= g.ratio
				op := "<="
				if g.atLeast {
					met, op = ratio >= g.ratio, ">="
				}
				verdict := "met"
				if !met {
					verdict = "NOT MET"
				}
				goal = fmt.Sprintf("%s %.1f: %s", op, g.ratio, verdict)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f\t%s\t%s\t\n", base, m, spread(a[m]), spread(r[m]), ratio, paired(a[m], r[m]), goal)
		}
	}
	if !found {
		fmt.Fprintln(tw, "(no amqpactor/raw-go-amqp pairs: the live benchmarks did not run; is AMQP_URL set?)\t\t\t\t\t\t\t")
	}
	tw.Flush()
	fmt.Fprintln(w, "medians over the runs (min..max); ratio = amqpactor / raw-go-amqp of the medians;")
	fmt.Fprintln(w, "paired = median of the per-run ratios (run i of one side against run i of the other)")
}

func printInproc(w io.Writer, results map[string]samples, names []string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := false
	for _, name := range names {
		if !strings.HasPrefix(name, "InprocEndToEnd") || len(results[name]["msg/s"]) == 0 {
			continue
		}
		if !header {
			fmt.Fprintln(w)
			fmt.Fprintln(tw, "in-process\tmsg/s\tB/op\tallocs/op\ttarget\t")
			header = true
		}
		s := results[name]
		verdict := "met"
		if scenario.Median(s["msg/s"]) < inprocTarget {
			verdict = "NOT MET"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t>= %d: %s\t\n", name, spread(s["msg/s"]), spread(s["B/op"]), spread(s["allocs/op"]), inprocTarget, verdict)
	}
	tw.Flush()
}
