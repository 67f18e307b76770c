package live

import (
	"testing"

	"github.com/amqpactor/amqpactor/test/kit/fleettest"
)

// TestPartitionsBalancedAcrossReplicas: three replicas on RabbitMQ 4 share
// Partitioned("orders-<unique>", 12), 30,000 messages over 300 groups; each
// replica comes to hold 4 ± 1 partitions, the two left after one stops
// 6 ± 1, and with a new one started 4 ± 1 again, each within 30 s; nothing
// lost, no group out of order, no partition handled by two replicas at once.
func TestPartitionsBalancedAcrossReplicas(t *testing.T) {
	u := brokerURL(t)
	addr := partitioned(t, u, "orders", 12, true)
	res := fleettest.RunBalance(t, fleettest.BalanceConfig{
		Config: fleettest.Config{Addr: addr, AppName: unique("orders-svc"), NewApp: rabbitApp(u)},
	})
	fleettest.RequireSound(t, res, 30000)
}
