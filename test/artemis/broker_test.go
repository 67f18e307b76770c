package artemis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/harness"
)

// TestTreeNamesTheBroker: the tree's connection node names the broker as
// its open frame does: Artemis sends the properties product
// "apache-activemq-artemis" and version "2.40.0", the same keys RabbitMQ
// uses, so the node reads "apache-activemq-artemis 2.40.0".
func TestTreeNamesTheBroker(t *testing.T) {
	app := newApp(t, "")
	start(t, app)
	conns := harness.OfKind(harness.Tree(t, app), "connection")
	require.NotEmpty(t, conns, "a connection node")
	rest, ok := strings.CutPrefix(conns[0].Broker, "apache-activemq-artemis ")
	require.True(t, ok, "Broker %q", conns[0].Broker)
	require.True(t, strings.HasPrefix(rest, "2.40."), "Broker %q: the test broker is Artemis 2.40", conns[0].Broker)
}

// TestTransactionNotSupported: go-amqp has no coordinator link, so a
// transaction on a Dial connector fails at once, saying why, and its
// function never runs: nothing is published outside a transaction that the
// caller believed was one.
func TestTransactionNotSupported(t *testing.T) {
	app := newApp(t, "")
	start(t, app)
	var ran atomic.Bool
	err := app.Transaction(bound(t), func(tx *amqpactor.Tx) error {
		ran.Store(true)
		return nil
	})
	require.Error(t, err)
	require.ErrorIs(t, err, amqpactor.ErrNotSupported)
	require.Contains(t, err.Error(), "coordinator", "the error says why: %v", err)
	require.False(t, ran.Load(), "the transaction's function must not run")
}

// TestRequestReplyThroughDynamicNode: 200 requests answered by a Responder
// through the broker's dynamic node (a temporary queue Artemis creates for
// the reply receiver), each reply matched to its request, and the tree's
// requests node says the replies come through a dynamic node.
func TestRequestReplyThroughDynamicNode(t *testing.T) {
	q := amqpactor.Queue(unique("rpc"))
	removeAddress(t, q.Name())
	server := newApp(t, "")
	_, err := server.Subscribe(q, amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: append([]byte("re: "), req.Body...)}, nil
	}))
	require.NoError(t, err)
	start(t, server)
	client := newApp(t, "")
	start(t, client)

	const n = 200
	ctx := bound(t)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				body := fmt.Sprintf("request %d", i)
				reply, err := client.Request(ctx, q, &amqpactor.Message{Body: []byte(body)})
				if err != nil {
					errs <- fmt.Errorf("request %d: %w", i, err)
					continue
				}
				if string(reply.Body) != "re: "+body {
					errs <- fmt.Errorf("request %d: reply %q", i, reply.Body)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	require.NoError(t, errors.Join(all...))

	reqs := harness.OfKind(harness.Tree(t, client), "requests")
	require.Len(t, reqs, 1, "one requests node:\n%s", harness.TreeText(harness.Tree(t, client)))
	require.Equal(t, "dynamic", reqs[0].ReplyNode, "the reply node")
	require.NotEmpty(t, reqs[0].Address, "the address Artemis gave the dynamic node")
	t.Logf("requests node: address %s, reply node %s, counters %v", reqs[0].Address, reqs[0].ReplyNode, reqs[0].Counters)
}
