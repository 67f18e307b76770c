package actors

import "time"

// Restarts is a parent's budget for starting a child again after its
// supervisor stopped it: at most Max starts within Within. A parent that
// spends it fails itself instead, so a fault that recurs on every start
// ends in a failed node rather than a loop. The zero value allows 10 a
// minute, as Supervisor does.
type Restarts struct {
	Max    int
	Within time.Duration
	at     []time.Time
}

// Spend records a start at now and reports whether it is within the budget.
func (r *Restarts) Spend(now time.Time) bool {
	max, within := r.Max, r.Within
	if max <= 0 {
		max = 10
	}
	if within <= 0 {
		within = time.Minute
	}
	keep := r.at[:0]
	for _, t := range r.at {
		if now.Sub(t) < within {
			keep = append(keep, t)
		}
	}
	r.at = append(keep, now)
	return len(r.at) <= max
}

// Idle reports that no start was recorded within the window before now:
// the budget is whole again, and its keeper may forget it.
func (r *Restarts) Idle(now time.Time) bool {
	within := r.Within
	if within <= 0 {
		within = time.Minute
	}
	return len(r.at) == 0 || now.Sub(r.at[len(r.at)-1]) >= within
}
