package live

import (
	"context"
	"net/url"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/kit/fleettest"
)

// TestForeignCensusConsumersCannotChurnPartitions: two replicas on RabbitMQ 4
// share Partitioned("census-<unique>", 4) and balance 2 and 2; then a client
// that is no replica attaches 20 receivers to the census queue with go-amqp,
// so the census counts 22 replicas and each replica's share is 1. The
// replicas stop handing partitions back and forth: at most 10 hand-overs in
// the 30 s after; nothing lost, no group out of order, no partition handled
// by two replicas at once.
func TestForeignCensusConsumersCannotChurnPartitions(t *testing.T) {
	u := brokerURL(t)
	addr := partitioned(t, u, "census", 4, true)
	res := fleettest.RunForeignCensus(t, fleettest.CensusConfig{
		Config: fleettest.Config{Addr: addr, AppName: unique("census-svc"), NewApp: rabbitApp(u)},
		Foreign: func(ctx context.Context, census amqpactor.Address) func() {
			return foreignConsumers(t, ctx, u, census, 20)
		},
	})
	fleettest.RequireSound(t, res, res.Published)
	require.Positive(t, res.Published)
	require.LessOrEqual(t, res.InWindow, 10, res.String())
}

// foreignConsumers attaches n receivers with one credit each to census on
// RabbitMQ 4 at u, on a connection of their own, and returns what closes it.
func foreignConsumers(t *testing.T, ctx context.Context, u string, census amqpactor.Address, n int) func() {
	t.Helper()
	conn, err := amqp.Dial(ctx, u, nil)
	require.NoError(t, err)
	sess, err := conn.NewSession(ctx, nil)
	require.NoError(t, err)
	for range n {
		_, err := sess.NewReceiver(ctx, "/queues/"+url.PathEscape(census.Name()), &amqp.ReceiverOptions{Credit: 1})
		require.NoError(t, err)
	}
	return func() {
		require.NoError(t, conn.Close())
	}
}
