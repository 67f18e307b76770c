package faults

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// changeLog records state changes by node path, in the order they came.
type changeLog struct {
	mu     sync.Mutex
	byPath map[string][]amqpactor.StateChange
}

func newChangeLog() *changeLog { return &changeLog{byPath: map[string][]amqpactor.StateChange{}} }

func (c *changeLog) add(sc amqpactor.StateChange) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byPath[sc.Path] = append(c.byPath[sc.Path], sc)
}

func (c *changeLog) of(path string) []amqpactor.StateChange {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.byPath[path])
}

func (c *changeLog) marks() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]int{}
	for p, cs := range c.byPath {
		m[p] = len(cs)
	}
	return m
}

func (c *changeLog) attached(path string) bool {
	cs := c.of(path)
	return len(cs) > 0 && cs[len(cs)-1].To == "attached"
}

// recovered reports whether path, after its first `from` changes, went
// down (detached, restarting, or stopped for a node a new incarnation
// replaces) and then attached again.
func (c *changeLog) recovered(path string, from int) bool {
	cs := c.of(path)
	if from > len(cs) {
		return false
	}
	down := false
	for _, sc := range cs[from:] {
		switch sc.To {
		case "detached", "restarting", "stopped":
			down = true
		case "attached":
			if down {
				return true
			}
		}
	}
	return false
}

func transitions(cs []amqpactor.StateChange) string {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s→%s", c.From, c.To)
	}
	return b.String()
}

// inOrder checks that each change starts where the previous one ended (or,
// for a node replaced by a new incarnation, after stopped, from nothing).
func inOrder(t *testing.T, who, path string, cs []amqpactor.StateChange) {
	t.Helper()
	prev := ""
	for i, sc := range cs {
		ok := sc.From == prev || (sc.From == "" && prev == "stopped")
		require.True(t, ok, "%s %s: change %d (%s→%s) does not follow %q: %s", who, path, i, sc.From, sc.To, prev, transitions(cs))
		prev = sc.To
	}
}

// TestLiveCutStateChanges: an App on RabbitMQ 4 through the proxy, with a
// subscription and a publish done; the proxy cuts its connection. The
// connection, the publisher, the subscription and their links each report
// attached → detached/restarting → attached, in order, on the actor
// system's EventStream and through WithStateChanges alike.
func TestLiveCutStateChanges(t *testing.T) {
	u := brokerURL(t)
	p, pu := viaProxy(t, u)
	q := liveQueue(t, u, "faults.events")
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	t.Cleanup(sys.Shutdown)
	fromStream, fromOption := newChangeLog(), newChangeLog()
	sub := sys.EventStream.Subscribe(func(evt any) {
		if sc, ok := evt.(*amqpactor.StateChange); ok {
			fromStream.add(*sc)
		}
	})
	t.Cleanup(func() { sys.EventStream.Unsubscribe(sub) })
	log, _ := newLog(t)
	app := amqpactor.New(amqpactor.Dial(pu, amqpactor.WithDialect(amqpactor.RabbitMQ4)),
		amqpactor.WithActorSystem(sys), amqpactor.WithLogger(log),
		amqpactor.WithBackoff(backoffInitial, backoffMax), amqpactor.WithCloseTimeout(3*time.Second),
		amqpactor.WithStateChanges(fromOption.add))
	got := newTally()
	_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error { got.add(m.MessageID.(string)); return nil },
		amqpactor.WithSubscriptionName("events-sub"))
	require.NoError(t, err)
	startApp(t, app)

	subPath := "connection/subscription:events-sub"
	nodes := []string{"connection", "connection/publisher", subPath, subPath + "/receiver", "connection/publisher/sender:" + q.Name()}
	ctx := bound(t, 2*time.Minute)
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{MessageID: "before", Durable: true}))
	require.Eventually(t, func() bool { return got.has("before") }, 20*time.Second, 5*time.Millisecond)
	for _, rec := range []*changeLog{fromStream, fromOption} {
		require.Eventually(t, func() bool {
			for _, n := range nodes {
				if !rec.attached(n) {
					return false
				}
			}
			return true
		}, 20*time.Second, 5*time.Millisecond, "every node attached")
	}
	marks := [2]map[string]int{fromStream.marks(), fromOption.marks()}

	require.NotZero(t, p.Cut(), "connections cut")
	// A sender with nothing to send re-attaches on the next publish.
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{MessageID: "after", Durable: true}))
	require.Eventually(t, func() bool { return got.has("after") }, 30*time.Second, 5*time.Millisecond)
	for i, rec := range []*changeLog{fromStream, fromOption} {
		for _, n := range nodes {
			require.Eventually(t, func() bool { return rec.recovered(n, marks[i][n]) }, 30*time.Second, 5*time.Millisecond,
				"%s: %s", n, transitions(rec.of(n)))
		}
	}
	for _, n := range nodes {
		inOrder(t, "EventStream", n, fromStream.of(n))
		inOrder(t, "WithStateChanges", n, fromOption.of(n))
		require.Equal(t, transitions(fromStream.of(n)), transitions(fromOption.of(n)), n)
		t.Logf("%s: %s", n, transitions(fromOption.of(n)))
	}
	// The connection went restarting, with the reason.
	cs := fromOption.of("connection")[marks[1]["connection"]:]
	require.Equal(t, "restarting", cs[0].To, transitions(cs))
	require.Error(t, cs[0].Err)
}
