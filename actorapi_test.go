package amqpactor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// startActorApp starts an App on broker and sys with the subscriptions sub
// makes; it stops at the end of the test.
func startActorApp(t *testing.T, broker *inproc.Broker, sys *actor.ActorSystem, sub func(app *amqpactor.App)) (*amqpactor.App, context.Context) {
	t.Helper()
	app := amqpactor.New(broker, amqpactor.WithActorSystem(sys))
	if sub != nil {
		sub(app)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		require.NoError(t, app.Stop(sctx))
	})
	return app, ctx
}

// An actor consuming through ActorHandler on 4 partitions sees every
// group-id's messages in order, each from the one partition of its group.
func TestActorHandlerKeepsGroupOrder(t *testing.T) {
	noLeaks(t)
	const groups, total = 20, 2000
	sys := sharedSystem(t)
	var mu sync.Mutex
	seen := map[string][]int{}
	parts := map[string]map[int]bool{}
	done := make(chan struct{})
	var n atomic.Int64
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		d, ok := c.Message().(*amqpactor.Delivery)
		if !ok {
			return
		}
		var i int
		_, _ = fmt.Sscan(string(d.Message.Body), &i)
		mu.Lock()
		g := d.Message.GroupID
		seen[g] = append(seen[g], i)
		if parts[g] == nil {
			parts[g] = map[int]bool{}
		}
		parts[g][d.Partition] = true
		mu.Unlock()
		if d.Address != amqpactor.Queue("ordered") {
			c.Respond(amqpactor.Done(fmt.Errorf("address %v", d.Address)))
			return
		}
		c.Respond(amqpactor.Done(nil))
		if n.Add(1) == total {
			close(done)
		}
	}))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	app, ctx := startActorApp(t, inproc.New(), sys, func(app *amqpactor.App) {
		_, err := app.Subscribe(amqpactor.Queue("ordered"), amqpactor.ActorHandler(pid), amqpactor.WithPartitions(4), amqpactor.WithCredit(100))
		require.NoError(t, err)
	})
	for i := range total {
		require.NoError(t, app.Publish(ctx, amqpactor.Queue("ordered"), &amqpactor.Message{
			Body: []byte(fmt.Sprint(i)), GroupID: fmt.Sprintf("g%d", i%groups),
		}, amqpactor.Settled()))
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("%d of %d handled", n.Load(), total)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, groups)
	used := map[int]bool{}
	for g, xs := range seen {
		require.Len(t, xs, total/groups, g)
		for k := 1; k < len(xs); k++ {
			require.Less(t, xs[k-1], xs[k], "group %s out of order", g)
		}
		require.Len(t, parts[g], 1, "group %s on more than one partition", g)
		for p := range parts[g] {
			require.True(t, p >= 0 && p < 4, "partition %d", p)
			used[p] = true
		}
	}
	require.Greater(t, len(used), 1, "groups spread over partitions")
}

// The actor's answer decides the outcome as a Handler's return does; no
// answer by the handler's deadline is a failure, and the message comes back.
func TestActorHandlerOutcomes(t *testing.T) {
	noLeaks(t)
	sys := sharedSystem(t)
	type seenMsg struct {
		body  string
		count uint32
	}
	seen := make(chan seenMsg, 16)
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		d, ok := c.Message().(*amqpactor.Delivery)
		if !ok {
			return
		}
		body := string(d.Message.Body)
		seen <- seenMsg{body, d.Message.DeliveryCount}
		switch {
		case body == "ok":
			c.Respond(amqpactor.Done(nil))
		case body == "bad":
			c.Respond(amqpactor.Done(amqpactor.Reject(errors.New("bad input"))))
		case d.Message.DeliveryCount > 0:
			c.Respond(amqpactor.Done(nil)) // the retry succeeds
		case body == "flaky":
			c.Respond(amqpactor.Done(errors.New("try again")))
		case body == "silent":
			// no answer
		}
	}))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	broker := inproc.New()
	h := amqpactor.ActorHandler(pid)
	app, ctx := startActorApp(t, broker, sys, func(app *amqpactor.App) {
		_, err := app.Subscribe(amqpactor.Queue("jobs"), func(ctx context.Context, m *amqpactor.Message) error {
			ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond) // the handler's deadline
			defer cancel()
			return h(ctx, m)
		})
		require.NoError(t, err)
	})
	next := func() seenMsg {
		select {
		case m := <-seen:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery")
			return seenMsg{}
		}
	}
	publish := func(body string) {
		require.NoError(t, app.Publish(ctx, amqpactor.Queue("jobs"), &amqpactor.Message{Body: []byte(body)}))
	}

	publish("ok")
	require.Equal(t, seenMsg{"ok", 0}, next())

	publish("bad")
	require.Equal(t, seenMsg{"bad", 0}, next())
	require.Eventually(t, func() bool { return len(broker.DeadLetters("jobs")) == 1 }, 5*time.Second, 10*time.Millisecond, "rejected")

	publish("flaky")
	require.Equal(t, seenMsg{"flaky", 0}, next())
	require.Equal(t, seenMsg{"flaky", 1}, next(), "modified: redelivered")

	start := time.Now()
	publish("silent")
	require.Equal(t, seenMsg{"silent", 0}, next())
	require.Equal(t, seenMsg{"silent", 1}, next(), "no answer: modified, redelivered")
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "after the deadline")
	require.Eventually(t, func() bool { return broker.QueueDepth("jobs") == 0 && broker.Unsettled("jobs") == 0 }, 5*time.Second, 10*time.Millisecond)
	require.Len(t, broker.DeadLetters("jobs"), 1)
}

// Subscribe refuses ActorHandler(nil).
func TestActorHandlerNilPID(t *testing.T) {
	app := amqpactor.New(inproc.New())
	_, err := app.Subscribe(amqpactor.Queue("q"), amqpactor.ActorHandler(nil))
	require.ErrorContains(t, err, "ActorHandler(nil)")
}

// publishMore asks the Publisher for a batch of publishes without waiting.
type publishMore struct{ n int }

// ping checks the publishing actor still answers while publishes are in
// flight.
type ping struct{}

type pong struct{ inFlight int64 }

// An actor publishes 1,000 messages through App.Publisher with ctx.Request:
// its Receive never blocks (it answers pings while publishes are in
// flight), every PublishResult is nil, and every message lands.
func TestPublisherFromAnActor(t *testing.T) {
	noLeaks(t)
	const total = 1000
	sys := sharedSystem(t)
	broker := inproc.New()
	broker.DeclareQueue("out")
	app, ctx := startActorApp(t, broker, sys, nil)
	publisher := app.Publisher()
	require.NotNil(t, publisher)
	require.Same(t, publisher, app.Publisher(), "one Publisher per App")

	results := make(chan error, total)
	var inFlight atomic.Int64
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *publishMore:
			for i := range m.n {
				inFlight.Add(1)
				c.Request(publisher, &amqpactor.PublishRequest{
					Address: amqpactor.Queue("out"), Message: &amqpactor.Message{Body: []byte(fmt.Sprint(i))},
				})
			}
		case *amqpactor.PublishResult:
			inFlight.Add(-1)
			results <- m.Err
		case *ping:
			c.Respond(&pong{inFlight: inFlight.Load()})
		}
	}))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })

	sys.Root.Send(pid, &publishMore{n: total})
	res, err := sys.Root.RequestFuture(pid, &ping{}, 5*time.Second).Result()
	require.NoError(t, err, "the publishing actor answers while its publishes are in flight")
	require.Greater(t, res.(*pong).inFlight, int64(0), "publishes in flight at the ping")

	for i := range total {
		select {
		case err := <-results:
			require.NoError(t, err, "result %d", i)
		case <-ctx.Done():
			t.Fatalf("%d of %d results", i, total)
		}
	}
	require.Equal(t, total, broker.QueueDepth("out"))
}

// Before Start the Publisher answers ErrNotStarted; a nil message or a zero
// address is answered with an error; after Stop there is no Publisher.
func TestPublisherErrors(t *testing.T) {
	noLeaks(t)
	sys := sharedSystem(t)
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys))
	require.Nil(t, amqpactor.New(inproc.New()).Publisher(), "no actor system before Start")
	publisher := app.Publisher()
	require.NotNil(t, publisher)
	ask := func(req *amqpactor.PublishRequest) error {
		res, err := sys.Root.RequestFuture(publisher, req, 5*time.Second).Result()
		require.NoError(t, err)
		return res.(*amqpactor.PublishResult).Err
	}
	msg := &amqpactor.Message{Body: []byte("x")}
	require.ErrorIs(t, ask(&amqpactor.PublishRequest{Address: amqpactor.Queue("q"), Message: msg}), amqpactor.ErrNotStarted)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	require.Same(t, publisher, app.Publisher())
	require.ErrorContains(t, ask(&amqpactor.PublishRequest{Address: amqpactor.Queue("q")}), "nil message")
	require.ErrorContains(t, ask(&amqpactor.PublishRequest{Message: msg}), "zero address")
	require.NoError(t, ask(&amqpactor.PublishRequest{Address: amqpactor.Queue("q"), Message: msg}))

	require.NoError(t, app.Stop(ctx))
	require.Nil(t, app.Publisher(), "stopped with the App")
}

// An actor that is gone is a failure at once, not at the deadline: the
// delivery is modified, and the retry policy ends it.
func TestActorHandlerDeadActor(t *testing.T) {
	noLeaks(t)
	sys := sharedSystem(t)
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	require.NoError(t, sys.Root.StopFuture(pid).Wait())
	broker := inproc.New()
	app, ctx := startActorApp(t, broker, sys, func(app *amqpactor.App) {
		_, err := app.Subscribe(amqpactor.Queue("gone"), amqpactor.ActorHandler(pid),
			amqpactor.WithRetry(amqpactor.RetryPolicy{MaxDeliveries: 2}))
		require.NoError(t, err)
	})
	start := time.Now()
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("gone"), &amqpactor.Message{Body: []byte("x")}))
	require.Eventually(t, func() bool { return len(broker.DeadLetters("gone")) == 1 }, 5*time.Second, 5*time.Millisecond)
	require.Less(t, time.Since(start), amqpactor.DefaultActorTimeout/2, "failed at once")
	dl := broker.DeadLetters("gone")[0]
	require.Equal(t, amqpactor.CondMaxDeliveries, dl.Annotations["x-opt-inproc-condition"])
	require.Contains(t, dl.Annotations["x-opt-inproc-description"], "did not answer")
}

// An actor that never answers fails the delivery at the subscription's
// WithHandlerTimeout: the broker redelivers it, and after the last attempt
// it is rejected. Without the option it would wait DefaultActorTimeout.
func TestActorHandlerHandlerTimeout(t *testing.T) {
	noLeaks(t)
	sys := sharedSystem(t)
	var asked atomic.Int32
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*amqpactor.Delivery); ok {
			asked.Add(1) // and never answers
		}
	}))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	broker := inproc.New()
	app, ctx := startActorApp(t, broker, sys, func(app *amqpactor.App) {
		_, err := app.Subscribe(amqpactor.Queue("silent"), amqpactor.ActorHandler(pid),
			amqpactor.WithHandlerTimeout(20*time.Millisecond), amqpactor.WithRetry(amqpactor.RetryPolicy{MaxDeliveries: 3}))
		require.NoError(t, err)
	})
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("silent"), &amqpactor.Message{Body: []byte("x")}))
	require.Eventually(t, func() bool { return len(broker.DeadLetters("silent")) == 1 }, 10*time.Second, 5*time.Millisecond,
		"three attempts, each failed at the handler timeout")
	require.EqualValues(t, 3, asked.Load())
	require.Contains(t, broker.DeadLetters("silent")[0].Annotations["x-opt-inproc-description"], "did not answer")
}
