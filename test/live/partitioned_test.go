package live

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/internal/brokeradmin"
	"github.com/amqpactor/amqpactor/internal/fleettest"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// TestPartitionedFleet: on RabbitMQ 4, Partitioned("orders-<unique>", 8)
// with three replicas, 16 groups × 500 messages, the busiest replica
// stopped mid-stream and a fourth started: nothing lost, no group out of
// order, no partition queue handled by two replicas at once. The partition
// queues are declared with x-single-active-consumer and deleted at the end.
func TestPartitionedFleet(t *testing.T) {
	u := brokerURL(t)
	addr := amqpactor.Partitioned(unique("orders"), 8)
	t.Cleanup(func() {
		mgmt(t, u, func(ctx context.Context, m *amqpwire.Management) {
			for i := range addr.Partitions() {
				err := brokeradmin.DeleteQueue(ctx, m, addr.Partition(i).Name())
				require.NoError(t, err)
			}
		})
	})
	res := fleettest.Run(t, fleettest.Config{
		Addr:    addr,
		AppName: unique("orders-svc"),
		NewApp: func(name string) *amqpactor.App {
			return amqpactor.New(amqpactor.Dial(u, amqpactor.WithDialect(amqpactor.RabbitMQ4)), amqpactor.WithName(name))
		},
	})
	t.Log(res)
	require.Equal(t, 8000, res.Published)
	require.Zero(t, res.Lost, res.String())
	require.Zero(t, res.Inversions, res.String())
	require.Zero(t, res.Overlaps, res.String())
	require.Positive(t, res.Handovers, "the stopped replica held partitions: "+res.String())

	mgmt(t, u, func(ctx context.Context, m *amqpwire.Management) {
		for i := range addr.Partitions() {
			info, err := m.QueueInfo(ctx, addr.Partition(i).Name())
			require.NoError(t, err)
			require.Equal(t, amqpwire.Quorum, info.Type)
			require.Equal(t, true, info.Arguments["x-single-active-consumer"], "queue %s", info.Name)
			require.Zero(t, info.Messages, "queue %s", info.Name)
		}
	})
}
