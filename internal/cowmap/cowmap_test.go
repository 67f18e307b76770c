package cowmap

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMap(t *testing.T) {
	var m Map[string, int]
	_, ok := m.Load("a")
	require.False(t, ok)
	m.Store("a", 1)
	v, loaded := m.LoadOrStore("a", 2)
	require.True(t, loaded)
	require.Equal(t, 1, v)
	v, loaded = m.LoadOrStore("b", 3)
	require.False(t, loaded)
	require.Equal(t, 3, v)
	seen := map[string]int{}
	m.Range(func(k string, v int) bool { seen[k] = v; return true })
	require.Equal(t, map[string]int{"a": 1, "b": 3}, seen)
	m.Delete("a")
	_, ok = m.Load("a")
	require.False(t, ok)
	m.Clear()
	_, ok = m.Load("b")
	require.False(t, ok)
}

// Readers never see a torn map while writers store and delete; each
// LoadOrStore of one key returns the same value to every caller.
func TestMapConcurrent(t *testing.T) {
	var m Map[string, *int]
	var wg sync.WaitGroup
	got := make([]*int, 8)
	for i := range got {
		wg.Go(func() {
			for j := range 200 {
				m.Store(fmt.Sprint("w", i, j), &j)
				m.Load(fmt.Sprint("w", (i+1)%8, j))
				m.Delete(fmt.Sprint("w", i, j-1))
			}
			v := i
			got[i], _ = m.LoadOrStore("shared", &v)
		})
	}
	wg.Wait()
	for _, p := range got {
		require.Same(t, got[0], p)
	}
}
