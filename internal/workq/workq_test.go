package workq

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFIFOAcrossTakes(t *testing.T) {
	q := New[int]()
	done := make(chan []int)
	go func() {
		var got []int
		for range q.Ready() {
			items, closed := q.Take()
			got = append(got, items...)
			if closed {
				done <- got
				return
			}
		}
	}()
	for i := range 1000 {
		require.True(t, q.Push(i))
	}
	q.Close()
	require.False(t, q.Push(-1), "a closed queue refuses pushes")
	select {
	case got := <-done:
		require.Len(t, got, 1000)
		for i, v := range got {
			require.Equal(t, i, v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("consumer never saw the close")
	}
}

// PushClose is what keeps a drain marker last: pushes racing with it either
// land before it or are refused, never after it.
func TestPushCloseIsLast(t *testing.T) {
	q := New[int]()
	const pushers, each = 8, 200
	start := make(chan struct{})
	accepted := make(chan int, pushers*each)
	var wg sync.WaitGroup
	for p := range pushers {
		wg.Go(func() {
			<-start
			for i := range each {
				v := p*each + i + 1
				if q.Push(v) {
					accepted <- v
				}
			}
		})
	}
	close(start)
	require.True(t, q.PushClose(-1))
	wg.Wait()
	close(accepted)
	require.False(t, q.PushClose(-2), "a closed queue refuses the marker too")

	items, closed := q.Take()
	require.True(t, closed)
	require.NotEmpty(t, items)
	require.Equal(t, -1, items[len(items)-1], "nothing comes after the marker")
	n := 0
	for range accepted {
		n++
	}
	require.Equal(t, n+1, len(items), "every accepted push is queued, before the marker")
}
