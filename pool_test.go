package amqpactor_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// handledSet counts the messages each queue's handler saw.
type handledSet struct {
	mu   sync.Mutex
	seen map[string]int
}

func (h *handledSet) handler(q string) amqpactor.Handler {
	return func(context.Context, *amqpactor.Message) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.seen == nil {
			h.seen = map[string]int{}
		}
		h.seen[q]++
		return nil
	}
}

func (h *handledSet) queues() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}

// connectionNodes walks the tree, requiring that every node's PID extends
// its parent's, and returns the connection nodes.
func connectionNodes(t *testing.T, tree *amqpactor.Node) []*amqpactor.Node {
	t.Helper()
	var conns []*amqpactor.Node
	var walk func(n *amqpactor.Node)
	walk = func(n *amqpactor.Node) {
		if n.Kind == "connection" {
			conns = append(conns, n)
		}
		for _, c := range n.Children {
			require.True(t, strings.HasPrefix(c.ActorPID().Id, n.ActorPID().Id+"/"),
				"%s (%s) is drawn under %s (%s)", c.Name, c.ActorPID().Id, n.Name, n.ActorPID().Id)
			walk(c)
		}
	}
	walk(tree)
	return conns
}

// An App with more subscriptions than one connection holds sessions (issue
// 27: RabbitMQ 4 allows 64) spreads them over a pool of connections: Start
// succeeds, every subscription handles its message, the tree shows each
// connection, and a Subscribe past the first connections' room after Start
// works too.
func TestPoolSpreadsSubscriptionsOverConnections(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	b := inproc.New(inproc.WithMaxSessions(16))
	app := amqpactor.New(b, amqpactor.WithName("pool"))
	var h handledSet
	const n = 100
	for i := range n {
		q := fmt.Sprintf("pool-%d", i)
		_, err := app.Subscribe(amqpactor.Queue(q), h.handler(q), amqpactor.WithPartitions(1))
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	stopped := false
	defer func() {
		if !stopped {
			_ = app.Stop(ctx)
		}
	}()
	for i := range n {
		require.NoError(t, app.Publish(ctx, amqpactor.Queue(fmt.Sprintf("pool-%d", i)), &amqpactor.Message{Body: []byte("x")}))
	}
	require.Eventually(t, func() bool { return h.queues() == n }, 30*time.Second, 10*time.Millisecond)

	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	require.Equal(t, "connection", tree.Name, "the tree's top node is the first connection")
	conns := connectionNodes(t, tree)
	// 16 sessions a connection, some kept on the first for the publisher
	// and requests: 100 subscriptions need at least 7 connections.
	require.GreaterOrEqual(t, len(conns), 7)
	require.Equal(t, "connection-2", conns[1].Name)
	require.GreaterOrEqual(t, b.Conns(), 7)
	require.Eventually(t, func() bool { return app.Ready() == nil }, 10*time.Second, 10*time.Millisecond)

	// After Start, past the room left: a new connection is added.
	for i := n; i < n+20; i++ {
		q := fmt.Sprintf("pool-%d", i)
		_, err := app.Subscribe(amqpactor.Queue(q), h.handler(q), amqpactor.WithPartitions(1))
		require.NoError(t, err)
		require.NoError(t, app.Publish(ctx, amqpactor.Queue(q), &amqpactor.Message{Body: []byte("x")}))
	}
	require.Eventually(t, func() bool { return h.queues() == n+20 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, app.Health())
	stopped = true
	require.NoError(t, app.Stop(ctx))
	require.Zero(t, b.Conns())
}

// WithMaxSessionsPerConnection lowers the figure the App plans with, for a
// broker that advertises more sessions than it allows (here, no limit).
func TestWithMaxSessionsPerConnectionLowersTheLimit(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	b := inproc.New()
	app := amqpactor.New(b, amqpactor.WithName("pool-opt"), amqpactor.WithMaxSessionsPerConnection(10))
	var h handledSet
	for i := range 20 {
		q := fmt.Sprintf("popt-%d", i)
		_, err := app.Subscribe(amqpactor.Queue(q), h.handler(q), amqpactor.WithPartitions(1))
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	// The first holds 10 less what it keeps for the publisher and
	// requests; the next hold 10 each.
	require.GreaterOrEqual(t, b.Conns(), 3)
	for i := range 20 {
		require.NoError(t, app.Publish(ctx, amqpactor.Queue(fmt.Sprintf("popt-%d", i)), &amqpactor.Message{Body: []byte("x")}))
	}
	require.Eventually(t, func() bool { return h.queues() == 20 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, app.Stop(ctx))
}

// A session the broker refuses although the App planned room for it (a
// broker that allows fewer than it advertised) fails the Subscribe with an
// error that names the limit and the option that lowers it; the connection
// and the other subscriptions go on.
func TestRefusedSessionNamesTheLimitAndTheOption(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	b := inproc.New(inproc.WithMaxSessions(16))
	app := amqpactor.New(b, amqpactor.WithName("pool-refused"))
	var h handledSet
	_, err := app.Subscribe(amqpactor.Queue("refused-0"), h.handler("refused-0"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()

	b.SetMaxSessions(1)
	_, err = app.Subscribe(amqpactor.Queue("refused-1"), h.handler("refused-1"))
	require.Error(t, err)
	require.ErrorContains(t, err, "resource-limit-exceeded")
	require.ErrorContains(t, err, "16 sessions")
	require.ErrorContains(t, err, "WithMaxSessionsPerConnection")

	b.SetMaxSessions(0)
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("refused-0"), &amqpactor.Message{Body: []byte("x")}))
	require.Eventually(t, func() bool { return h.queues() == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, b.Conns())
}
