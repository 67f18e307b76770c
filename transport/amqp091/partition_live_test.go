package amqp091_test

import (
	"context"
	"testing"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/test/kit/fleettest"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// TestLivePartitionedFleet091 is test/live's TestPartitionedFleet on
// Dial091: Partitioned(name, 8) with three replicas, 16 groups × 500
// messages, the busiest replica stopped mid-stream and a fourth started:
// nothing lost, no group out of order, no partition queue handled by two
// replicas at once (x-single-active-consumer over 0-9-1).
func TestLivePartitionedFleet091(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 partitioned fleet test")
	addr := amqpactor.Partitioned(unique("amqp091-orders"), 8)
	s := newSide(t, url)
	for i := range addr.Partitions() {
		s.deleteQueue(addr.Partition(i).Name())
	}
	s.deleteQueue(protocol.CensusOf(addr).Name())
	res := fleettest.Run(t, fleettest.Config{
		Addr:    addr,
		AppName: unique("amqp091-orders-svc"),
		NewApp: func(name string) *amqpactor.App {
			return amqpactor.New(amqpactor.Dial091(url), amqpactor.WithName(name))
		},
	})
	fleettest.RequireSound(t, res, 8000)
	require.Positive(t, res.Handovers, "the stopped replica held partitions: "+res.String())
	for i := range addr.Partitions() {
		require.Zero(t, s.depth(addr.Partition(i).Name()), "partition queue %d left with messages", i)
	}
}

// Dial091: three replicas share Partitioned(name, 12), 30,000 messages over
// 300 groups, balanced after each start and after a stop (see
// fleettest.RunBalance): nothing lost, no group out of order, no partition
// queue handled by two replicas at once. 0-9-1 says nothing of which
// consumer is active: a replica holds a partition once it got a delivery.
func TestLivePartitionsBalanced091(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 partition balancing test")
	addr := amqpactor.Partitioned(unique("amqp091-balanced"), 12)
	s := newSide(t, url)
	for i := range addr.Partitions() {
		s.deleteQueue(addr.Partition(i).Name())
	}
	s.deleteQueue(protocol.CensusOf(addr).Name())
	res := fleettest.RunBalance(t, fleettest.BalanceConfig{
		Config: fleettest.Config{
			Addr:    addr,
			AppName: unique("amqp091-balanced-svc"),
			NewApp: func(name string) *amqpactor.App {
				return amqpactor.New(amqpactor.Dial091(url), amqpactor.WithName(name))
			},
		},
	})
	fleettest.RequireSound(t, res, 30000)
}

// TestLiveForeignCensusConsumers091 is test/live's
// TestForeignCensusConsumersCannotChurnPartitions on Dial091: 20 consumers
// of a 0-9-1 client that is no replica on the census queue; at most 10
// hand-overs in the 30 s after, nothing lost, no group out of order.
func TestLiveForeignCensusConsumers091(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 census test")
	addr := amqpactor.Partitioned(unique("amqp091-census"), 4)
	s := newSide(t, url)
	for i := range addr.Partitions() {
		s.deleteQueue(addr.Partition(i).Name())
	}
	s.deleteQueue(protocol.CensusOf(addr).Name())
	res := fleettest.RunForeignCensus(t, fleettest.CensusConfig{
		Config: fleettest.Config{
			Addr:    addr,
			AppName: unique("amqp091-census-svc"),
			NewApp: func(name string) *amqpactor.App {
				return amqpactor.New(amqpactor.Dial091(url), amqpactor.WithName(name))
			},
		},
		Foreign: func(_ context.Context, census amqpactor.Address) func() {
			conn, err := rmq.Dial(url)
			require.NoError(t, err)
			ch, err := conn.Channel()
			require.NoError(t, err)
			for range 20 {
				_, err := ch.Consume(census.Name(), "", false, false, false, false, nil)
				require.NoError(t, err)
			}
			return func() { require.NoError(t, conn.Close()) }
		},
	})
	fleettest.RequireSound(t, res, res.Published)
	require.Positive(t, res.Published)
	require.LessOrEqual(t, res.InWindow, 10, res.String())
}
