package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

func TestRedactedCommandLine(t *testing.T) {
	got := commandLine([]string{"/some/build/dir/ab", "-url=amqp://guest:secret@host:5673/", "-url", "amqp://u:p@h/", "-backlog", "", "-queues", "quorum,classic"})
	want := "ab -url=amqp://guest:xxxxx@host:5673/ -url amqp://u:xxxxx@h/ -backlog '' -queues quorum,classic"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{1234567: "1,234,567", 1000: "1,000", 999.96: "1,000", 12.34: "12.3", 1.234: "1.23", 0: "0.00"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %s, want %s", v, got, want)
		}
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"-rounds", "0"}, {"-queues", "stream"}, {"-sizes", "100,x"}, {"extra"}} {
		var out, errs bytes.Buffer
		if code := run(append([]string{"ab"}, args...), &out, &errs); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, errs.String())
		}
	}
}

// TestInprocOnly runs the program without a broker: the live parts are
// skipped loudly and the in-process table is still printed.
func TestInprocOnly(t *testing.T) {
	t.Setenv("AMQP_URL", "")
	var out, errs bytes.Buffer
	code := run([]string{"ab", "-rounds", "2", "-inproc", "2", "-inproc-n", "2000", "-micro=false"}, &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	if !strings.Contains(errs.String(), "SKIPPING ALL LIVE") {
		t.Errorf("no loud skip on stderr:\n%s", errs.String())
	}
	for _, s := range []string{"the live runs were SKIPPED", "## In-process broker end to end", "\n| 2 | "} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
	if strings.Contains(out.String(), "## Live") || strings.Contains(out.String(), "## Memory") {
		t.Errorf("live tables without a broker:\n%s", out.String())
	}
}

func TestFramesFlagsAndHelpers(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run([]string{"ab", "-frame-publishers", "0"}, &out, &errs); code != 2 {
		t.Errorf("-frame-publishers 0: exit %d, want 2", code)
	}
	t.Setenv("AMQP_URL", "")
	out.Reset()
	if code := run([]string{"ab", "-frames"}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "-frames needs a broker") {
		t.Errorf("-frames without a broker: exit %d, want 1 (%s)", code, errs.String())
	}
	if hp, err := brokerHostPort("amqp://u:p@broker:5673/vh"); err != nil || hp != "broker:5673" {
		t.Errorf("brokerHostPort: %q, %v", hp, err)
	}
	if hp, err := brokerHostPort("amqp://broker"); err != nil || hp != "broker:5672" {
		t.Errorf("brokerHostPort without a port: %q, %v", hp, err)
	}
	if _, err := brokerHostPort("amqps://broker"); err == nil {
		t.Error("brokerHostPort accepted amqps")
	}
	if u, err := viaProxy("amqp://u:p@broker:5673/vh", "127.0.0.1:9"); err != nil || u != "amqp://u:p@127.0.0.1:9/vh" {
		t.Errorf("viaProxy: %q, %v", u, err)
	}
	if _, ok := processTicks(os.Getpid()); !ok && runtime.GOOS == "linux" {
		t.Error("processTicks cannot read this process")
	}
	if _, ok := processTicks(0); ok {
		t.Error("processTicks without a pid")
	}
}

// TestFramesLive is a short live run of -frames: it must parse the whole
// stream of both sides and print the table; it times nothing.
func TestFramesLive(t *testing.T) {
	u := livetest.URL(t, "the -frames smoke test of cmd/ab")
	var out, errs bytes.Buffer
	code := run([]string{"ab", "-frames", "-url", u, "-rounds", "1", "-n", "300", "-queues", "quorum", "-sizes", "100",
		"-frame-publishers", "4", "-broker-pid", strconv.Itoa(os.Getpid())}, &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	for _, s := range []string{"## Frames per message", "| 1 goroutine, 256 outstanding | quorum | 100 B | amqpactor | **", "| 4 publishers | quorum | 100 B | raw-go-amqp | **", "paired ratio"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
	if strings.Contains(out.String(), "## In-process") {
		t.Errorf("-frames ran more than the frames table:\n%s", out.String())
	}
}

// TestCPUProfileLive is a short live run with -cpuprofile: one profile per
// run, named after it, that test/bench/cpusplit.sh can read.
func TestCPUProfileLive(t *testing.T) {
	u := livetest.URL(t, "the -cpuprofile smoke test of cmd/ab")
	dir := t.TempDir()
	var out, errs bytes.Buffer
	code := run([]string{"ab", "-url", u, "-rounds", "1", "-n", "300", "-rpc", "20", "-queues", "quorum", "-sizes", "100",
		"-inproc", "", "-backlog", "", "-micro=false", "-cpuprofile", dir}, &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	var files []string
	for _, kind := range []string{"throughput", "throughput-async", "request-reply"} {
		for _, side := range []string{"amqpactor", "raw-go-amqp"} {
			f := filepath.Join(dir, kind+"-quorum-100-B-"+side+"-r1.pprof")
			if st, err := os.Stat(f); err != nil || st.Size() == 0 {
				t.Errorf("no profile %s: %v", f, err)
			}
			files = append(files, f)
		}
	}
	if t.Failed() {
		return
	}
	split, err := exec.Command("bash", append([]string{"../../cpusplit.sh"}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("cpusplit.sh: %v\n%s", err, split)
	}
	rows := strings.Split(strings.TrimSpace(string(split)), "\n")
	if len(rows) != 2+len(files) {
		t.Fatalf("cpusplit.sh printed %d lines for %d profiles:\n%s", len(rows), len(files), split)
	}
	for i, row := range rows[2:] {
		want := "| " + strings.TrimSuffix(filepath.Base(files[i]), ".pprof") + " | "
		if !strings.HasPrefix(row, want) || strings.Count(row, "|") != 8 {
			t.Errorf("row %q, want it to start with %q and have 7 cells", row, want)
		}
	}
}

func TestTable(t *testing.T) {
	var b strings.Builder
	table(&b, "Allocation micro-benchmarks", "name", "ns/op", "B/op", "allocs/op")
	want := "\n## Allocation micro-benchmarks\n\n| name | ns/op | B/op | allocs/op |\n| --- | --- | --- | --- |\n"
	if b.String() != want {
		t.Fatalf("table wrote %q, want %q", b.String(), want)
	}
}
