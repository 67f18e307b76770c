package amqpactor_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/internal/fleettest"
)

// Three replicas share Partitioned("orders", 12) on the in-process broker:
// 30,000 messages over 300 groups; each replica comes to hold 4 ± 1
// partitions, the two left after one stops 6 ± 1, and with a new one
// started 4 ± 1 again; nothing lost, no group out of order, no partition
// handled by two replicas at once.
func TestPartitionsBalancedAcrossReplicasInProcess(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	b := inproc.New()
	addr := amqpactor.Partitioned("orders-balanced", 12)
	res := fleettest.RunBalance(t, fleettest.BalanceConfig{
		Addr:    addr,
		AppName: "orders-svc",
		NewApp:  func(name string) *amqpactor.App { return amqpactor.New(b, amqpactor.WithName(name)) },
		Diagnose: func() string {
			var s []string
			for i := range addr.Partitions() {
				q := addr.Partition(i).Name()
				s = append(s, fmt.Sprintf("%s: %d waiting, %d unsettled", q, b.QueueDepth(q), b.Unsettled(q)))
			}
			return strings.Join(s, "; ")
		},
	})
	t.Log(res)
	require.Equal(t, 30000, res.Published)
	require.Zero(t, res.Lost, res.String())
	require.Zero(t, res.Inversions, res.String())
	require.Zero(t, res.Overlaps, res.String())
}
