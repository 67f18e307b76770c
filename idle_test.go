package amqpactor_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// An idle subscription keeps at most 3 goroutines of ours in-process: its
// partitions' workers return once idle (they had work: every partition of
// every subscription handled a message), leaving its link's pump and
// settler. IDLE_SUBSCRIPTIONS raises the count (docs/BENCHMARKS.md).
func TestIdleSubscriptionGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	n := 100
	if v, _ := strconv.Atoi(os.Getenv("IDLE_SUBSCRIPTIONS")); v > 0 {
		n = v
	}
	const partitions = 8 // the default
	b := inproc.New()
	app := amqpactor.New(b, amqpactor.WithName("idle"))
	var h handledSet
	h.subscribeAll(t, app, "idle", n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fp := newFootprint(n)
	require.NoError(t, app.Start(ctx))
	// Another App publishes, so that its senders are gone when counting.
	pub := amqpactor.New(b, amqpactor.WithName("idle-pub"))
	require.NoError(t, pub.Start(ctx))
	for i := range n {
		q := fmt.Sprintf("idle-%d", i)
		for range partitions { // round robin: one for each partition
			require.NoError(t, pub.Publish(ctx, amqpactor.Queue(q), &amqpactor.Message{Body: []byte("x")}))
		}
	}
	require.NoError(t, pub.Stop(ctx))
	require.Eventually(t, func() bool { return h.total() == n*partitions }, time.Minute, 10*time.Millisecond, "every message handled")
	idle := assert.Eventually(t, func() bool { return fp.goroutines() <= 3 }, 30*time.Second, 50*time.Millisecond)
	heap, stacks := fp.kib()
	t.Logf("%d idle subscriptions, %d partitions each: %.1f goroutines, %.0f KiB heap and %.0f KiB of goroutine stacks per subscription",
		n, partitions, fp.goroutines(), heap, stacks)
	require.True(t, idle, "an idle subscription keeps at most 3 goroutines (%.1f)", fp.goroutines())
	require.NoError(t, app.Stop(ctx))
}
