package workq

import (
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
