package actors

import (
	"testing"
	"time"
)

func TestRestartsBudget(t *testing.T) {
	r := Restarts{Max: 3, Within: time.Minute}
	t0 := time.Now()
	for i := range 3 {
		if !r.Spend(t0.Add(time.Duration(i) * time.Second)) {
			t.Fatalf("start %d refused within the budget", i+1)
		}
	}
	if r.Spend(t0.Add(3 * time.Second)) {
		t.Fatal("a fourth start within a minute allowed")
	}
	if !r.Spend(t0.Add(2 * time.Minute)) {
		t.Fatal("a start after the window refused")
	}
}

func TestRestartsIdle(t *testing.T) {
	var r Restarts
	t0 := time.Now()
	if !r.Idle(t0) {
		t.Fatal("a budget never spent is not idle")
	}
	r.Spend(t0)
	if r.Idle(t0.Add(time.Second)) {
		t.Fatal("idle a second after a start")
	}
	if !r.Idle(t0.Add(time.Minute)) {
		t.Fatal("not idle a window after the last start")
	}
}
