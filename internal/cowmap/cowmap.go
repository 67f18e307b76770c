// Package cowmap is a map for many concurrent readers and rare writers,
// such as the per-address tables every publish looks up: a read is a plain
// lookup in an immutable map (hashed by the key type's own hash function,
// where sync.Map hashes an interface through the type's metadata, on the
// path of every publish), and a write copies the map. It
// suits tables with a bound on their size.
package cowmap

import (
	"sync"
	"sync/atomic"
)

// Map is the zero value ready to use. Writes are serialised; reads never
// wait.
type Map[K comparable, V any] struct {
	mu sync.Mutex // serialises writers
	p  atomic.Pointer[map[K]V]
}

// Load returns the value stored for k.
func (m *Map[K, V]) Load(k K) (V, bool) {
	if p := m.p.Load(); p != nil {
		v, ok := (*p)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// update replaces the map with a copy that f changed.
func (m *Map[K, V]) update(f func(map[K]V)) {
	old := m.p.Load()
	n := 1
	if old != nil {
		n += len(*old)
	}
	next := make(map[K]V, n)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	f(next)
	m.p.Store(&next)
}

// Store sets the value for k.
func (m *Map[K, V]) Store(k K, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.update(func(mm map[K]V) { mm[k] = v })
}

// LoadOrStore returns the value stored for k, if any (loaded true);
// otherwise it stores and returns v.
func (m *Map[K, V]) LoadOrStore(k K, v V) (actual V, loaded bool) {
	if got, ok := m.Load(k); ok {
		return got, true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if got, ok := m.Load(k); ok {
		return got, true
	}
	m.update(func(mm map[K]V) { mm[k] = v })
	return v, false
}

// Delete removes k.
func (m *Map[K, V]) Delete(k K) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.Load(k); !ok {
		return
	}
	m.update(func(mm map[K]V) { delete(mm, k) })
}

// Clear removes everything.
func (m *Map[K, V]) Clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.p.Store(nil)
}

// Range calls f for each entry of the map as it was when Range began,
// until f returns false.
func (m *Map[K, V]) Range(f func(K, V) bool) {
	p := m.p.Load()
	if p == nil {
		return
	}
	for k, v := range *p {
		if !f(k, v) {
			return
		}
	}
}
