package dispatcher_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/dispatcher"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
)

// recorder is a Settler that notes who sent each batch of outcomes.
type recorder struct {
	mu      sync.Mutex
	from    []*actor.PID
	batches int
	settled atomic.Int64
}

func (r *recorder) Settle(ds []*protocol.Delivery, from *actor.PID) {
	r.mu.Lock()
	r.from = append(r.from, from)
	r.batches++
	r.mu.Unlock()
	for _, d := range ds {
		d.Release()
	}
	r.settled.Add(int64(len(ds)))
}

// One *Deliveries sent to the dispatcher actor reaches the partitions as
// messages, and the outcomes come back in batches sent by the partition
// actors, children of the dispatcher: no delivery or disposition skips an
// actor.
func TestDeliveriesAndDispositionsAreMessages(t *testing.T) {
	const n = 1000
	var seen sync.Map // the partition messages each actor received
	spec := &protocol.SubscriptionSpec{
		Address: address.Queue("msgs"), Partitions: 4,
		Handler: func(context.Context, *messages.Message) error { return nil },
		Outcome: func(context.Context, error, *messages.Message) messages.Outcome {
			return messages.Outcome{Kind: messages.Accepted}
		},
	}
	r := newRigWith(t, spec, func(messages.Outcome) {})
	rec := &recorder{}
	r.to = rec
	// Spy on what every partition's mailbox receives.
	spy := func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			if m, ok := env.Message.(*dispatcher.Deliveries); ok {
				v, _ := seen.LoadOrStore(c.Self().Id, new(atomic.Int64))
				v.(*atomic.Int64).Add(int64(len(m.Items)))
			}
			next(c, env)
		}
	}
	_ = r.sys.Root.StopFuture(r.disp).Wait()
	r.env.Middleware = []actor.ReceiverMiddleware{spy}
	var err error
	r.disp, err = r.sys.Root.SpawnNamed(dispatcher.New(r.env, spec, dispatcher.NewRouter(spec)), "spied")
	require.NoError(t, err)

	ds := make([]*protocol.Delivery, n)
	for i := range ds {
		d := protocol.NewDelivery()
		d.ID, d.Message, d.Ctx, d.To = uint64(i+1), &messages.Message{GroupID: fmt.Sprintf("g%d", i%10)}, context.Background(), rec
		ds[i] = d
	}
	r.route(ds...)
	require.Eventually(t, func() bool { return rec.settled.Load() == n }, 10*time.Second, time.Millisecond, "every delivery settled")

	var toPartitions int64
	seen.Range(func(k, v any) bool {
		if strings.HasPrefix(k.(string), r.disp.Id+"/partition-") {
			toPartitions += v.(*atomic.Int64).Load()
		}
		return true
	})
	require.EqualValues(t, n, toPartitions, "each delivery reached a partition actor's mailbox")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Less(t, rec.batches, n, "outcomes travel in batches")
	for _, from := range rec.from {
		require.NotNil(t, from, "a disposition names the partition that sends it")
		require.True(t, strings.HasPrefix(from.Id, r.disp.Id+"/partition-"), "sent by a partition of the dispatcher: %s", from.Id)
	}
}

// A partition's worker returns once it has been idle for Env.IdleAfter, and
// the next delivery starts a new one, which handles it.
func TestIdleWorkersReturn(t *testing.T) {
	var handled atomic.Int64
	hold := make(chan struct{})
	r := newRig(t, 8, func(context.Context, *messages.Message) error {
		<-hold
		handled.Add(1)
		return nil
	}, func(messages.Outcome) {}, func(e *actors.Env) { e.IdleAfter = 20 * time.Millisecond })
	r.describe(t, r.disp) // its partitions have started
	require.Zero(t, workers(), "no worker before there is work")
	r.deliver(1000, &messages.Message{GroupID: "first"})
	require.Eventually(t, func() bool { return workers() == 1 }, 10*time.Second, time.Millisecond, "a worker for the work")
	close(hold)
	require.Eventually(t, func() bool { return handled.Load() == 1 }, 10*time.Second, time.Millisecond)
	handled.Store(0)
	for round := range 3 {
		for i := range 64 {
			r.deliver(uint64(round*64+i+1), &messages.Message{GroupID: fmt.Sprintf("g%d", i)})
		}
		require.Eventually(t, func() bool { return handled.Load() == int64(64*(round+1)) }, 10*time.Second, time.Millisecond)
		require.Eventually(t, func() bool { return workers() == 0 }, 10*time.Second, time.Millisecond,
			"the idle workers returned (round %d)", round)
	}
}

// workers counts the goroutines running a partition's worker.
func workers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "dispatcher.(*partition).startWorker.func1")
		}
		buf = make([]byte, 2*len(buf))
	}
}
