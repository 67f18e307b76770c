package dispatcher_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/messages"
)

func (r *rig) describe(t *testing.T, pid *actor.PID) *protocol.Described {
	res, err := r.sys.Root.RequestFuture(pid, &protocol.Describe{}, time.Second).Result()
	require.NoError(t, err)
	return res.(*protocol.Described)
}

// Partitions and the dispatcher that panic mid-stream lose no delivery and
// keep each group-id's order: a restarted partition's worker finishes what
// it took before the next one takes the rest of the queue, and a restarted
// dispatcher's partitions carry on with the same, still open, queues.
func TestRestartMidStream(t *testing.T) {
	const groups, perGroup = 10, 1000
	var mu sync.Mutex
	seen := map[string][]int{}
	handler := func(_ context.Context, m *messages.Message) error {
		n, _ := strconv.Atoi(string(m.Body))
		mu.Lock()
		seen[m.GroupID] = append(seen[m.GroupID], n)
		mu.Unlock()
		return nil
	}
	var verdicts atomic.Int64
	r := newRig(t, 4, handler, func(messages.Outcome) { verdicts.Add(1) })
	crash := func(i int) {
		if i%2 == 0 {
			r.sys.Root.Send(r.disp, &testhook.Crash{Reason: "test"})
			return
		}
		parts := r.describe(t, r.disp).Children
		r.sys.Root.Send(parts[(i/2)%len(parts)], &testhook.Crash{Reason: "test"})
	}
	id, crashes := uint64(0), 0
	for i := range perGroup {
		for g := range groups {
			id++
			r.deliver(id, &messages.Message{GroupID: fmt.Sprintf("g%d", g), Body: []byte(strconv.Itoa(i))})
		}
		if i%100 == 50 {
			crash(crashes)
			crashes++
		}
	}
	require.Eventually(t, func() bool { return verdicts.Load() == groups*perGroup }, 10*time.Second, time.Millisecond,
		"every delivery settled")

	mu.Lock()
	lost, dups := 0, 0
	for g := range groups {
		got := seen[fmt.Sprintf("g%d", g)]
		dups += max(len(got)-perGroup, 0)
		lost += max(perGroup-len(got), 0)
		for i, n := range got {
			require.Equal(t, i, n, "group g%d out of order", g)
		}
	}
	mu.Unlock()
	t.Logf("crashes %d, lost %d, duplicates %d", crashes, lost, dups)
	require.Zero(t, lost)

	d := r.describe(t, r.disp)
	require.EqualValues(t, crashes/2, d.Node.Counters["panics"], "the dispatcher's node shows its restarts")
	var partitionPanics uint64
	for _, pid := range d.Children {
		partitionPanics += r.describe(t, pid).Node.Counters["panics"]
	}
	// A dispatcher's restart replaces its partitions (and their counts):
	// the restart of a partition after the dispatcher's last one shows.
	require.EqualValues(t, 1, partitionPanics, "the partitions' nodes show their restarts")
}
