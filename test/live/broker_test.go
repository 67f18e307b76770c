package live

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// TestTreeNamesTheBroker: the tree's connection node says which broker and
// release the App is on, over AMQP 1.0 and 0-9-1 alike, as the broker's
// open names it.
func TestTreeNamesTheBroker(t *testing.T) {
	u := brokerURL(t)
	v := livetest.RabbitMQ(t, u)
	for name, app := range map[string]*amqpactor.App{
		"amqp10":  newApp(t, u, nil),
		"amqp091": amqpactor.New(amqpactor.Dial091(u)),
	} {
		start(t, app)
		tree, err := app.Tree(bound(t))
		require.NoError(t, err)
		var conn *amqpactor.Node
		var walk func(n *amqpactor.Node)
		walk = func(n *amqpactor.Node) {
			if n.Kind == "connection" && conn == nil {
				conn = n
			}
			for _, c := range n.Children {
				walk(c)
			}
		}
		walk(tree)
		require.NotNil(t, conn, "%s: a connection node", name)
		rest, ok := strings.CutPrefix(conn.Broker, "RabbitMQ ")
		require.True(t, ok, "%s: Broker %q", name, conn.Broker)
		got, err := livetest.ParseVersion(rest)
		require.NoError(t, err)
		require.Equal(t, v, got, "%s: Broker %q", name, conn.Broker)
	}
}
