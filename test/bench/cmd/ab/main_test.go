package main

import (
	"bytes"
	"strings"
	"testing"
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
