package receiver_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/receiver"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// queue is a broker's queue: a closed link gives back what it held.
type queue struct {
	q         chan *amqp.Message
	mu        sync.Mutex
	accepted  map[string]int
	delivered map[string]int
	links     int
	open      int // links attached and not closed
	maxOpen   int
}

func (b *queue) NewSender(context.Context, transport.SenderOptions) (transport.Sender, error) {
	return nil, errors.New("fake: no senders")
}

func (b *queue) NewReceiver(context.Context, transport.ReceiverOptions) (transport.Receiver, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.links++
	b.open++
	b.maxOpen = max(b.maxOpen, b.open)
	return &queueLink{b: b, held: map[*amqp.Message]bool{}, done: make(chan struct{})}, nil
}

func (b *queue) Close(context.Context) error { return nil }

type queueLink struct {
	b      *queue
	held   map[*amqp.Message]bool // under b.mu
	closed bool
	done   chan struct{}
}

func (l *queueLink) Address() string          { return "q" }
func (l *queueLink) IssueCredit(uint32) error { return nil }

func (l *queueLink) Receive(ctx context.Context) (*amqp.Message, error) {
	select {
	case m := <-l.b.q:
		l.b.mu.Lock()
		defer l.b.mu.Unlock()
		if l.closed {
			l.b.q <- m
			return nil, &amqp.LinkError{}
		}
		l.held[m] = true
		l.b.delivered[string(m.GetData())]++
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.done:
		return nil, &amqp.LinkError{}
	}
}

func (l *queueLink) Settle(_ context.Context, m *amqp.Message, o messages.Outcome) error {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if l.closed || !l.held[m] {
		return &amqp.LinkError{}
	}
	delete(l.held, m)
	if o.Kind == messages.Accepted {
		l.b.accepted[string(m.GetData())]++
	} else {
		l.b.q <- m
	}
	return nil
}

func (l *queueLink) Close(context.Context) error {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	l.b.open--
	close(l.done)
	for m := range l.held {
		l.b.q <- m // released: the broker delivers it again
	}
	l.held = nil
	return nil
}

// A receiver that panics mid-stream, several times, loses no delivery:
// the dead incarnation's link closes, the broker delivers what it had not
// settled again, and never two links feed the route at once.
func TestRestartMidStream(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()
	env := &actors.Env{Root: sys.Root, Log: slog.New(slog.DiscardHandler), CloseTimeout: 5 * time.Second,
		Base: context.Background(), Backoff: actors.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}}
	const n, crashes = 10000, 5
	b := &queue{q: make(chan *amqp.Message, n), accepted: map[string]int{}, delivered: map[string]int{}}
	for i := range n {
		b.q <- amqp.NewMessage(fmt.Appendf(nil, "%d", i))
	}
	spec := &protocol.SubscriptionSpec{Address: address.Queue("q"), Credit: 64, Partitions: 1}

	// One worker settles, as a partition does.
	work := make(chan *protocol.Delivery, n)
	var worker sync.WaitGroup
	worker.Go(func() {
		for d := range work {
			d.Settle(messages.Outcome{Kind: messages.Accepted})
		}
	})
	route := func(d *protocol.Delivery) { work <- d }
	spawned := make(chan *actor.PID, 1)
	props := receiver.New(env, b, spec, routeActor(sys, route), false, false)
	ppid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*actor.Started); ok {
			spawned <- c.Spawn(props)
		}
	}, actor.WithSupervisor(actors.Supervisor())))
	pid := <-spawned

	accepted := func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.accepted)
	}
	for c := range crashes {
		require.Eventually(t, func() bool { return accepted() >= (c+1)*n/(crashes+1) }, 10*time.Second, time.Millisecond)
		sys.Root.Send(pid, &testhook.Crash{Reason: "test"})
	}
	require.Eventually(t, func() bool { return accepted() == n }, 20*time.Second, time.Millisecond, "every message accepted")

	res, err := sys.Root.RequestFuture(pid, &protocol.Describe{}, time.Second).Result()
	require.NoError(t, err)
	node := res.(*protocol.Described).Node
	require.EqualValues(t, crashes, node.Counters["panics"], "the tree shows every restart")
	require.GreaterOrEqual(t, node.Restarts, crashes)

	// Every message may be accepted on the fifth link before the last
	// crash is taken: the last incarnation's attach is then still under way,
	// so its link is awaited, not read at once.
	linksNow := func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.links
	}
	require.Eventually(t, func() bool { return linksNow() >= crashes+1 }, 10*time.Second, time.Millisecond, "a link for the last incarnation")
	b.mu.Lock()
	dups := 0
	for _, c := range b.delivered {
		dups += c - 1
	}
	links, maxOpen := b.links, b.maxOpen
	b.mu.Unlock()
	t.Logf("lost %d, duplicates %d, links %d, at most %d open at once", n-accepted(), dups, links, maxOpen)
	require.Equal(t, crashes+1, links, "one link per incarnation")

	require.NoError(t, sys.Root.PoisonFuture(ppid).Wait())
	close(work)
	worker.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, env.Wait(ctx), "every goroutine of every incarnation ended")
}
