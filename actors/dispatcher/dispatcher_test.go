package dispatcher_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/dispatcher"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
)

// The dead-letter throttle protoactor starts on a system's first dead
// letter (a restart test sends to an incarnation that is gone) outlives
// the system for a moment; every other actor package ignores it too.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// rig runs a dispatcher with its partitions on the App's pool, sends it
// deliveries as a link's pump does, and settles like a deliver.Link: it
// recycles the Delivery and calls onVerdict.
type rig struct {
	sys  *actor.ActorSystem
	pool *actors.Pool
	env  *actors.Env
	disp *actor.PID
	rt   *dispatcher.Router
	to   protocol.Settler
}

type settleFunc func(*protocol.Delivery, messages.Outcome)

func (f settleFunc) Settle(ds []*protocol.Delivery, _ *actor.PID) {
	for _, d := range ds {
		f(d, d.Outcome)
	}
}

func newRig(tb testing.TB, partitions int, handler protocol.Handler, onVerdict func(messages.Outcome), tune ...func(*actors.Env)) *rig {
	return newRigWith(tb, &protocol.SubscriptionSpec{
		Address: address.Queue("bench"), Partitions: partitions, Handler: handler,
		Outcome: func(context.Context, error, *messages.Message) messages.Outcome {
			return messages.Outcome{Kind: messages.Accepted}
		},
	}, onVerdict, tune...)
}

func newRigWith(tb testing.TB, spec *protocol.SubscriptionSpec, onVerdict func(messages.Outcome), tune ...func(*actors.Env)) *rig {
	return newRigOn(tb, spec, dispatcher.NewRouter(spec), onVerdict, tune...)
}

// newRigOn is newRigWith on the router rt of spec.
func newRigOn(tb testing.TB, spec *protocol.SubscriptionSpec, rt *dispatcher.Router, onVerdict func(messages.Outcome), tune ...func(*actors.Env)) *rig {
	return newRigUnder(tb, spec, rt, nil, onVerdict, tune...)
}

// newRigUnder is newRigOn with the dispatcher spawned by a parent actor
// that supervises it with sup (nil: the dispatcher is a root actor).
func newRigUnder(tb testing.TB, spec *protocol.SubscriptionSpec, rt *dispatcher.Router, sup actor.SupervisorStrategy, onVerdict func(messages.Outcome), tune ...func(*actors.Env)) *rig {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	pool := actors.NewPool(4)
	env := &actors.Env{Root: sys.Root, Mailboxes: pool, Base: context.Background()}
	for _, f := range tune {
		f(env)
	}
	r := &rig{sys: sys, pool: pool, env: env, rt: rt}
	var err error
	if sup == nil {
		r.disp, err = sys.Root.SpawnNamed(dispatcher.New(env, spec, r.rt), "dispatcher")
		require.NoError(tb, err)
	} else {
		spawned := make(chan *actor.PID, 1)
		_, err = sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
			if _, ok := c.Message().(*actor.Started); ok {
				spawned <- c.Spawn(dispatcher.New(env, spec, r.rt))
			}
		}, actor.WithSupervisor(sup)), "parent")
		require.NoError(tb, err)
		r.disp = <-spawned
	}
	r.to = settleFunc(func(d *protocol.Delivery, o messages.Outcome) {
		d.Release()
		onVerdict(o)
	})
	tb.Cleanup(r.stop)
	return r
}

func (r *rig) stop() {
	_ = r.sys.Root.StopFuture(r.disp).Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = r.env.Wait(ctx)
	r.sys.Shutdown()
	r.pool.Close()
}

func (r *rig) deliver(id uint64, m *messages.Message) {
	d := protocol.NewDelivery()
	d.ID, d.Message, d.Ctx, d.To = id, m, context.Background(), r.to
	r.route(d)
}

// route sends d to the dispatcher, as the receiver does.
func (r *rig) route(ds ...*protocol.Delivery) {
	m := dispatcher.NewDeliveries()
	m.Items = append(m.Items, ds...)
	r.sys.Root.Send(r.disp, m)
}

// Deliveries of one group-id run in order, one at a time, whatever the
// number of partitions.
func TestGroupsRunInOrder(t *testing.T) {
	const groups, perGroup = 5, 200
	var mu sync.Mutex
	seen := map[string][]int{}
	running := map[string]bool{}
	var overlap atomic.Bool
	handler := func(_ context.Context, m *messages.Message) error {
		mu.Lock()
		if running[m.GroupID] {
			overlap.Store(true)
		}
		running[m.GroupID] = true
		mu.Unlock()
		n, _ := strconv.Atoi(string(m.Body))
		mu.Lock()
		seen[m.GroupID] = append(seen[m.GroupID], n)
		running[m.GroupID] = false
		mu.Unlock()
		return nil
	}
	var verdicts atomic.Int64
	r := newRig(t, 4, handler, func(messages.Outcome) { verdicts.Add(1) })
	id := uint64(0)
	for i := range perGroup {
		for g := range groups {
			id++
			r.deliver(id, &messages.Message{GroupID: fmt.Sprintf("g%d", g), Body: []byte(strconv.Itoa(i))})
		}
	}
	require.Eventually(t, func() bool { return verdicts.Load() == groups*perGroup }, 10*time.Second, time.Millisecond)
	require.False(t, overlap.Load(), "two deliveries of one group ran at once")
	mu.Lock()
	defer mu.Unlock()
	for g, got := range seen {
		require.Len(t, got, perGroup, g)
		for i, n := range got {
			require.Equal(t, i, n, "group %s out of order", g)
		}
	}
}

// A handler's context carries the subscription's address and the index of
// the partition that runs it: one partition per group-id.
func TestHandlerContextCarriesPartition(t *testing.T) {
	var mu sync.Mutex
	parts := map[string]map[int]bool{}
	var missing atomic.Bool
	handler := func(ctx context.Context, m *messages.Message) error {
		p := protocol.PartitionFrom(ctx)
		if p == nil || p.Address != address.Queue("bench") || p.Index < 0 || p.Index >= 4 {
			missing.Store(true)
			return nil
		}
		mu.Lock()
		if parts[m.GroupID] == nil {
			parts[m.GroupID] = map[int]bool{}
		}
		parts[m.GroupID][p.Index] = true
		mu.Unlock()
		return nil
	}
	var verdicts atomic.Int64
	r := newRig(t, 4, handler, func(messages.Outcome) { verdicts.Add(1) })
	for i := range 200 {
		r.deliver(uint64(i+1), &messages.Message{GroupID: fmt.Sprintf("g%d", i%20)})
	}
	require.Eventually(t, func() bool { return verdicts.Load() == 200 }, 10*time.Second, time.Millisecond)
	require.False(t, missing.Load(), "a handler's context without its partition")
	mu.Lock()
	defer mu.Unlock()
	used := map[int]bool{}
	for g, ps := range parts {
		require.Len(t, ps, 1, "group %s on more than one partition", g)
		for p := range ps {
			used[p] = true
		}
	}
	require.Greater(t, len(used), 1)
}

// BenchmarkDispatch: a delivery in, routed to a partition, the handler run,
// the outcome settled with the link. One op is one delivery; Deliveries are
// recycled as the receiver recycles them. batch is how many deliveries one
// message to the dispatcher carries (the pump sends what the link had
// prefetched: 1 on a quiet link).
func BenchmarkDispatch(b *testing.B) {
	for _, partitions := range []int{1, 8} {
		for _, group := range []string{"", "g"} {
			for _, batch := range []int{1, 64} {
				benchDispatch(b, partitions, group, batch)
			}
		}
	}
}

func benchDispatch(b *testing.B, partitions int, group string, batch int) {
	{
		{
			name := fmt.Sprintf("partitions=%d/group-id=%t/batch=%d", partitions, group != "", batch)
			b.Run(name, func(b *testing.B) {
				var settled atomic.Int64
				done := make(chan struct{})
				total := int64(b.N)
				r := newRig(b, partitions, func(context.Context, *messages.Message) error { return nil },
					func(messages.Outcome) {
						if settled.Add(1) == total {
							close(done)
						}
					})
				msgs := make([]*messages.Message, 64)
				for i := range msgs {
					msgs[i] = &messages.Message{Body: make([]byte, 100)}
					if group != "" {
						msgs[i].GroupID = group + strconv.Itoa(i)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				pending := make([]*protocol.Delivery, 0, batch)
				for i := range b.N {
					d := protocol.NewDelivery()
					d.ID, d.Message, d.Ctx, d.To = uint64(i), msgs[i%len(msgs)], context.Background(), r.to
					pending = append(pending, d)
					if len(pending) == batch || i == b.N-1 {
						r.route(pending...)
						pending = pending[:0]
					}
				}
				select {
				case <-done:
				case <-time.After(time.Minute):
					b.Fatalf("%d of %d settled", settled.Load(), total)
				}
			})
		}
	}
}
