package ctxdone

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// table is the tests' own: each test takes shards of its own.
var table Table

// closed reports whether c is closed within a second.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	case <-time.After(time.Second):
		return false
	}
}

func isOpen(c <-chan struct{}) bool {
	select {
	case <-c:
		return false
	default:
		return true
	}
}

// free waits until shard i has no watch.
func free(t *testing.T, i uint32) {
	t.Helper()
	require.Eventually(t, func() bool { return table.shards[i%shards].watch.Load() == nil }, 5*time.Second, time.Millisecond)
}

func TestNeverDone(t *testing.T) {
	require.Nil(t, table.Shard(context.Background(), 0))
	require.Nil(t, table.Shard(context.WithValue(context.Background(), t, 1), 0))
}

func TestSecondUseGetsAWatchThatEndsWithTheContext(t *testing.T) {
	const i = 1
	free(t, i)
	ctx, cancel := context.WithCancel(context.Background())
	require.Equal(t, ctx.Done(), table.Shard(ctx, i), "a context seen once waits on its own Done")
	w := table.Shard(ctx, i)
	require.NotEqual(t, ctx.Done(), w, "seen twice in a row: the shard's own channel")
	require.Equal(t, w, table.Shard(ctx, i), "and the same one after that")
	require.Equal(t, w, table.Shard(context.WithValue(ctx, t, 1), i), "a child sharing the Done channel shares the watch")
	require.True(t, isOpen(w))

	cancel()
	require.True(t, closed(w), "the watch must close when the context ends")
	free(t, i)
}

func TestTheShardIsOneContextsAtATime(t *testing.T) {
	const i = 2
	free(t, i)
	a, cancelA := context.WithCancel(context.Background())
	b, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	table.Shard(a, i)
	wa := table.Shard(a, i)
	require.NotEqual(t, a.Done(), wa)
	table.Shard(b, i)
	require.Equal(t, b.Done(), table.Shard(b, i), "while a holds the shard, b waits on its own Done")
	require.Equal(t, b.Done(), table.Shard(b, i+shards), "whatever index names the shard")
	other := table.Shard(b, i+1)
	require.Equal(t, b.Done(), other, "b is new to shard i+1")

	cancelA()
	require.True(t, closed(wa))
	free(t, i)
	table.Shard(b, i)
	wb := table.Shard(b, i)
	require.NotEqual(t, b.Done(), wb, "once a ended, b can have the shard")
	cancelB()
	require.True(t, closed(wb))
	free(t, i)
	free(t, i+1)
}

func TestAContextAlreadyDone(t *testing.T) {
	const i = 3
	free(t, i)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	table.Shard(ctx, i)
	require.True(t, closed(table.Shard(ctx, i)))
	free(t, i)
}

func TestDeadlineEndsTheWatch(t *testing.T) {
	const i = 4
	free(t, i)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	table.Shard(ctx, i)
	w := table.Shard(ctx, i)
	require.True(t, closed(w))
	require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
	free(t, i)
}

// TestManyWaiters: goroutines sharing one context over every shard all
// see its end, however the watches were set up among them.
func TestManyWaiters(t *testing.T) {
	for i := range uint32(shards) {
		free(t, i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	ready := make(chan struct{}, 64)
	for g := range 64 {
		wg.Go(func() {
			var c <-chan struct{}
			for n := range 50 {
				c = table.Shard(ctx, uint32(g+n))
			}
			ready <- struct{}{}
			<-c
		})
	}
	for range 64 {
		<-ready
	}
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	require.True(t, closed(done), "every waiter must wake when the shared context ends")
	for i := range uint32(shards) {
		free(t, i)
	}
}

// TestCloseLetsALongLivedContextGo: after Close, a context that is never
// cancelled holds no relay of the table (stopping a relay reports whether it
// was still registered), and Shard hands out Done channels.
func TestCloseLetsALongLivedContextGo(t *testing.T) {
	var tb Table
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tb.Shard(ctx, 5)
	w := tb.Shard(ctx, 5)
	require.NotEqual(t, ctx.Done(), w)
	ws := tb.shards[5].watch.Load()
	require.NotNil(t, ws)
	tb.Close()
	require.Nil(t, tb.shards[5].watch.Load(), "the watch is gone")
	require.False(t, (*ws.stop.Load())(), "its relay was unregistered by Close")
	require.Equal(t, ctx.Done(), tb.Shard(ctx, 5))
	require.Equal(t, ctx.Done(), tb.Shard(ctx, 5), "no new watch once closed")
	require.Nil(t, tb.shards[5].watch.Load())
	require.True(t, isOpen(w), "an unregistered relay never closes its channel")
}
