package harness

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// Changes records state changes by node path, in the order they came. Its
// Add is what amqpactor.WithStateChanges or an EventStream subscriber calls.
type Changes struct {
	mu     sync.Mutex
	byPath map[string][]amqpactor.StateChange
}

func NewChanges() *Changes { return &Changes{byPath: map[string][]amqpactor.StateChange{}} }

func (c *Changes) Add(sc amqpactor.StateChange) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byPath[sc.Path] = append(c.byPath[sc.Path], sc)
}

// Of returns a copy of what path went through.
func (c *Changes) Of(path string) []amqpactor.StateChange {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.byPath[path])
}

// Marks returns how many changes each path has had so far, for Recovered.
func (c *Changes) Marks() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]int{}
	for p, cs := range c.byPath {
		m[p] = len(cs)
	}
	return m
}

// Paths returns the paths seen, sorted.
func (c *Changes) Paths() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ps []string
	for p := range c.byPath {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// Attached reports whether path's last state is attached.
func (c *Changes) Attached(path string) bool {
	cs := c.Of(path)
	return len(cs) > 0 && cs[len(cs)-1].To == "attached"
}

// AllAttached reports whether every one of paths is attached.
func (c *Changes) AllAttached(paths []string) bool {
	for _, p := range paths {
		if !c.Attached(p) {
			return false
		}
	}
	return true
}

// AttachedTo lists the addresses path was attached to, in order.
func (c *Changes) AttachedTo(path string) []string {
	var out []string
	for _, s := range c.Of(path) {
		if s.To == "attached" {
			out = append(out, s.Address)
		}
	}
	return out
}

// Recovered reports whether path, after its first `from` changes, went down
// (detached, restarting, or stopped for a node that a new incarnation
// replaces) and then attached again.
func (c *Changes) Recovered(path string, from int) bool {
	cs := c.Of(path)
	if from > len(cs) {
		return false
	}
	down := false
	for _, sc := range cs[from:] {
		switch sc.To {
		case "detached", "restarting", "stopped":
			down = true
		case "attached":
			if down {
				return true
			}
		}
	}
	return false
}

// Transitions spells cs as "from→to from→to ...".
func Transitions(cs []amqpactor.StateChange) string {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s→%s", c.From, c.To)
	}
	return b.String()
}

// InOrder checks that each of path's changes starts where the previous one
// ended (or, for a node replaced by a new incarnation, after stopped, from
// nothing): a change lost or out of order breaks the chain.
func InOrder(t testing.TB, who, path string, cs []amqpactor.StateChange) {
	t.Helper()
	prev := ""
	for i, sc := range cs {
		ok := sc.From == prev || (sc.From == "" && prev == "stopped")
		require.True(t, ok, "%s %s: change %d (%s→%s) does not follow %q: %s", who, path, i, sc.From, sc.To, prev, Transitions(cs))
		prev = sc.To
	}
}

// Chained is InOrder, and each change names path and has a time.
func Chained(t testing.TB, who, path string, cs []amqpactor.StateChange) {
	t.Helper()
	for i, sc := range cs {
		require.Equal(t, path, sc.Path)
		require.False(t, sc.At.IsZero(), "%s %s: change %d has no time", who, path, i)
	}
	InOrder(t, who, path, cs)
}
