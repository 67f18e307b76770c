package harness

import (
	"sync"
	"sync/atomic"
)

// Tally counts deliveries by message-id.
type Tally struct {
	mu     sync.Mutex
	counts map[string]int
	total  atomic.Int64
}

func NewTally() *Tally { return &Tally{counts: map[string]int{}} }

func (t *Tally) Add(id string) {
	t.mu.Lock()
	t.counts[id]++
	t.mu.Unlock()
	t.total.Add(1)
}

// Total is how many deliveries there were, duplicates included.
func (t *Tally) Total() int64 { return t.total.Load() }

// Distinct is how many ids were delivered at least once.
func (t *Tally) Distinct() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.counts)
}

func (t *Tally) Has(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts[id] > 0
}

// Missing returns the ids of ids never delivered.
func (t *Tally) Missing(ids []string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, id := range ids {
		if t.counts[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

// Duplicates is how many deliveries came after an id's first.
func (t *Tally) Duplicates() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.counts {
		n += c - 1
	}
	return n
}
