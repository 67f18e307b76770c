package harness_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/test/harness"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

func TestTally(t *testing.T) {
	tl := harness.NewTally()
	for _, id := range []string{"a", "b", "a", "a"} {
		tl.Add(id)
	}
	require.EqualValues(t, 4, tl.Total())
	require.Equal(t, 2, tl.Distinct())
	require.Equal(t, 2, tl.Duplicates())
	require.True(t, tl.Has("b"))
	require.False(t, tl.Has("c"))
	require.Equal(t, []string{"c"}, tl.Missing([]string{"a", "b", "c"}))
}

func TestChangesRecoveredAndChained(t *testing.T) {
	c := harness.NewChanges()
	at := time.Now()
	for _, s := range [][2]string{{"", "attaching"}, {"attaching", "attached"}, {"attached", "restarting"}, {"restarting", "attached"}} {
		c.Add(amqpactor.StateChange{Path: "connection", From: s[0], To: s[1], At: at, Address: "amqp://" + s[1]})
	}
	require.True(t, c.Attached("connection"))
	require.True(t, c.AllAttached([]string{"connection"}))
	require.False(t, c.AllAttached([]string{"connection", "connection/publisher"}))
	require.True(t, c.Recovered("connection", 0))
	require.True(t, c.Recovered("connection", 2), "down and up again after the first attach")
	require.False(t, c.Recovered("connection", 3), "only the attach after the restart")
	require.False(t, c.Recovered("connection", 9))
	require.Equal(t, map[string]int{"connection": 4}, c.Marks())
	require.Equal(t, []string{"amqp://attached", "amqp://attached"}, c.AttachedTo("connection"))
	require.Equal(t, "→attaching attaching→attached attached→restarting restarting→attached", harness.Transitions(c.Of("connection")))
	harness.Chained(t, "test", "connection", c.Of("connection"))

	// A change that does not start where the last ended breaks the chain.
	broken := append(c.Of("connection"), amqpactor.StateChange{Path: "connection", From: "detached", To: "attached", At: at})
	ft := &fakeT{TB: t}
	func() {
		defer func() { _ = recover() }()
		harness.InOrder(ft, "test", "connection", broken)
	}()
	require.True(t, ft.failed, "a broken chain fails the test")
}

// fakeT records a failure instead of failing the real test; FailNow stops
// the checker's goroutine as testing's does.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Errorf(string, ...any) { f.failed = true }
func (f *fakeT) FailNow()              { f.failed = true; panic(errStop) }
func (f *fakeT) Helper()               {}

var errStop = errors.New("stopped")

func TestPublishAllEveryID(t *testing.T) {
	app := amqpactor.New(inproc.New())
	q := amqpactor.Queue(harness.Unique("harness"))
	got := harness.NewTally()
	_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		id, _ := m.MessageID.(string)
		got.Add(id)
		return nil
	})
	require.NoError(t, err)
	ctx := harness.Bound(t, time.Minute)
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, app.Stop(sctx))
	})
	all := harness.IDs("m", 200)
	require.Equal(t, "m-00199", all[199])
	pub := harness.PublishAll(ctx, app, q, all, 4, false)
	pub.Wait()
	require.NoError(t, pub.Err())
	require.EqualValues(t, 200, pub.Confirmed.Load())
	require.Zero(t, pub.Errors.Load())
	require.Eventually(t, func() bool { return got.Distinct() == len(all) }, 30*time.Second, 5*time.Millisecond,
		"delivered %d of %d", got.Distinct(), len(all))
	root := harness.Tree(t, app)
	require.NotEmpty(t, harness.OfKind(root, "sender"))
	require.Contains(t, harness.TreeText(root), "[sender]")
	require.EqualValues(t, 0, harness.Sum(root, "sender", "resent"))
}

func TestLogBufferMax(t *testing.T) {
	b := &harness.LogBuffer{Max: 4}
	n, err := b.Write([]byte("abcdef"))
	require.NoError(t, err)
	require.Equal(t, 6, n)
	n, err = b.Write([]byte("gh"))
	require.NoError(t, err)
	require.Equal(t, 2, n, "a full buffer still takes the write")
	require.Equal(t, "abcdef", b.String())
}

func TestBlockerHoldsUntilReleased(t *testing.T) {
	b := harness.NewBlocker()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, b.Handle(ctx, &amqpactor.Message{}), context.Canceled, "a held message whose context ends fails")
	require.Zero(t, b.Handled())
	done := make(chan error, 1)
	go func() { done <- b.Handle(context.Background(), &amqpactor.Message{}) }()
	b.Release()
	b.Release() // a second release is a no-op
	require.NoError(t, <-done)
	require.EqualValues(t, 1, b.Handled())
	require.Positive(t, harness.HeapInuse())
}

func TestEarlyEnd(t *testing.T) {
	ctx, cancel := harness.EarlyEnd(0, time.Hour)
	defer cancel()
	require.ErrorIs(t, ctx.Err(), context.Canceled, "cancelled before it is handed out")
	ctx, cancel = harness.EarlyEnd(1, time.Hour)
	defer cancel()
	<-ctx.Done() // cancelled by a goroutine
	require.ErrorIs(t, ctx.Err(), context.Canceled)
	for _, i := range []int{2, 3} {
		ctx, cancel := harness.EarlyEnd(i, time.Millisecond)
		<-ctx.Done()
		require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded, "the deadline, not a cancel")
		cancel()
	}
}
