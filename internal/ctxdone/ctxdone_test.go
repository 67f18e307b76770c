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

func newWaiter() *Waiter { return &Waiter{Done: make(chan error, 1)} }

// answer answers w as a sender would: through Answered, once.
func answer(w *Waiter, err error) bool {
	if w.Answered().CompareAndSwap(false, true) {
		w.Done <- err
		return true
	}
	return false
}

// answerOf reads w's answer within a second.
func answerOf(t *testing.T, w *Waiter) error {
	t.Helper()
	select {
	case err := <-w.Done:
		return err
	case <-time.After(time.Second):
		t.Fatal("no answer")
		return nil
	}
}

// listed counts the waiters on shard i.
func listed(tb *Table, i uint32) int {
	s := &tb.shards[i%shards]
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for w := s.waiters; w != nil; w = w.next {
		n++
	}
	return n
}

// TestEnlistOnlyForAWatchedOrNeverDoneContext: a context new to the shard,
// or another's while the shard watches one, is not enlisted (the caller
// selects on what Enlist returns, which counts as a use, as Shard does).
func TestEnlistOnlyForAWatchedOrNeverDoneContext(t *testing.T) {
	var tb Table
	defer tb.Close()
	a, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	w := newWaiter()
	c, ok := tb.Enlist(a, 0, w)
	require.False(t, ok, "a context seen once is not worth a watch")
	require.Equal(t, a.Done(), c)
	c, ok = tb.Enlist(a, 0, w)
	require.False(t, ok, "the second use sets up the watch and waits on it")
	require.NotEqual(t, a.Done(), c)
	_, ok = tb.Enlist(a, 0, w)
	require.True(t, ok, "watched: enlisted")
	require.Equal(t, 1, listed(&tb, 0))
	tb.Delist(0, w)
	require.Zero(t, listed(&tb, 0))

	b, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	for range 3 {
		_, ok = tb.Enlist(b, 0, w)
		require.False(t, ok, "the shard is a's while a lives")
	}
	_, ok = tb.Enlist(context.Background(), 0, w)
	require.True(t, ok, "a context never done needs no watch")
	tb.Delist(0, w)
	tb.Delist(0, w) // twice is harmless
	require.Zero(t, listed(&tb, 0))
}

// TestTheEndOfAContextAnswersItsWaitersOnly: the waiters of the context that
// ended get ErrEnded, others on the shard wait on; a waiter answered first
// by its sender keeps that answer.
func TestTheEndOfAContextAnswersItsWaitersOnly(t *testing.T) {
	var tb Table
	defer tb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Shard(ctx, 1)
	tb.Shard(ctx, 1)
	mine, answered, never := newWaiter(), newWaiter(), newWaiter()
	for _, w := range []*Waiter{mine, answered} {
		_, ok := tb.Enlist(ctx, 1, w)
		require.True(t, ok)
	}
	_, ok := tb.Enlist(context.Background(), 1, never)
	require.True(t, ok)
	require.True(t, answer(answered, nil))
	cancel()
	require.ErrorIs(t, answerOf(t, mine), ErrEnded)
	require.NoError(t, answerOf(t, answered), "the sender's answer stands")
	require.False(t, answer(mine, nil), "answered once only")
	require.Equal(t, 1, listed(&tb, 1), "the other context's waiter waits on")
	require.True(t, answer(never, nil))
	require.NoError(t, answerOf(t, never))
	tb.Delist(1, never)
	tb.Delist(1, answered)
	require.Zero(t, listed(&tb, 1))
}

// TestStopAnswersEveryWaiterAndEveryLaterOne.
func TestStopAnswersEveryWaiterAndEveryLaterOne(t *testing.T) {
	var tb Table
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tb.Shard(ctx, 2)
	tb.Shard(ctx, 2)
	a, b := newWaiter(), newWaiter()
	_, ok := tb.Enlist(ctx, 2, a)
	require.True(t, ok)
	_, ok = tb.Enlist(context.Background(), 7, b)
	require.True(t, ok)
	tb.Stop()
	require.ErrorIs(t, answerOf(t, a), ErrStopped)
	require.ErrorIs(t, answerOf(t, b), ErrStopped)
	late := newWaiter()
	_, ok = tb.Enlist(context.Background(), 3, late)
	require.True(t, ok)
	require.ErrorIs(t, answerOf(t, late), ErrStopped, "enlisted after Stop: answered at once")
	tb.Delist(3, late)
	tb.Close()
	_, ok = tb.Enlist(context.Background(), 3, late)
	require.False(t, ok, "closed: nothing is enlisted")
	for i := range uint32(shards) {
		require.Zero(t, listed(&tb, i))
	}
}

// TestEnlistRacingTheEnd: however the end of the context and the enlisting
// interleave, every waiter gets exactly one answer.
func TestEnlistRacingTheEnd(t *testing.T) {
	var tb Table
	defer tb.Close()
	for range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		tb.Shard(ctx, 4)
		tb.Shard(ctx, 4)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				w := newWaiter()
				if _, ok := tb.Enlist(ctx, 4, w); !ok {
					return // the watch ended first
				}
				require.ErrorIs(t, answerOf(t, w), ErrEnded)
				tb.Delist(4, w)
			})
		}
		cancel()
		wg.Wait()
		require.Zero(t, listed(&tb, 4))
		free4 := func() bool { return tb.shards[4].watch.Load() == nil }
		require.Eventually(t, free4, 5*time.Second, time.Millisecond)
	}
}
