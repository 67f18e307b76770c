package amqpactor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/internal/protocol"
)

// Every node of a started App's tree carries a PID that answers a request:
// the Describe the tree itself asks, sent to Node.ActorPID; and every
// node's PID extends its parent's.
func TestNodeActorPIDAnswers(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName("pids"))
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(context.Context, *amqpactor.Message) error { return nil },
		amqpactor.WithPartitions(2))
	require.NoError(t, err)
	_, err = app.Subscribe(amqpactor.Queue("rpc"), amqpactor.Responder(func(_ context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: req.Body}, nil
	}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("x")}))
	_, err = app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("ping")})
	require.NoError(t, err)

	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	kinds := map[string]int{}
	var walk func(n *amqpactor.Node)
	walk = func(n *amqpactor.Node) {
		pid := n.ActorPID()
		require.NotNil(t, pid, "node %s (%s)", n.Name, n.Kind)
		require.Equal(t, n.PID, pid.String(), "node %s: the text PID and ActorPID name one actor", n.Name)
		res, err := sys.Root.RequestFuture(pid, &protocol.Describe{}, 2*time.Second).Result()
		require.NoError(t, err, "node %s (%s)", n.Name, n.Kind)
		d, ok := res.(*protocol.Described)
		require.True(t, ok, "node %s answered %T", n.Name, res)
		require.Equal(t, n.Name, d.Node.Name)
		kinds[n.Kind]++
		for _, c := range n.Children {
			// The tree drawn is protoactor's own (issue 26): a child's PID
			// extends its parent's.
			require.True(t, strings.HasPrefix(c.ActorPID().Id, pid.Id+"/"),
				"%s (%s) is drawn under %s (%s)", c.Name, c.ActorPID().Id, n.Name, pid.Id)
			walk(c)
		}
	}
	walk(tree)
	for _, k := range []string{"connection", "publisher", "sender", "subscription", "receiver", "dispatcher", "partition"} {
		require.NotZero(t, kinds[k], "no %s node in the tree: %v", k, kinds)
	}
	t.Log(kinds)

	// A node that did not come from Tree has no usable PID.
	require.Nil(t, (&amqpactor.Node{Name: "x", PID: tree.PID}).ActorPID())
	require.Nil(t, (*amqpactor.Node)(nil).ActorPID())
}
