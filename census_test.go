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
	"github.com/amqpactor/amqpactor/test/harness"
	"github.com/amqpactor/amqpactor/test/kit/fleettest"
	"github.com/amqpactor/amqpactor/transport"
)

// Two replicas share Partitioned("census", 4) on the in-process broker and
// balance 2 and 2; then 20 receivers that are no replicas attach to the
// census queue, so the census counts 22 replicas and each replica's share
// is 1. Neither can hold its share, and a partition handed over comes
// straight back: the replicas stop handing over (at most 10 hand-overs in
// the 10 s after) and say which census queue misled them; nothing lost, no
// group out of order, no partition handled by two replicas at once.
func TestForeignCensusConsumersCannotChurnPartitionsInProcess(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	b := inproc.New()
	log, logs := harness.NewLog(t)
	addr := amqpactor.Partitioned("census", 4)
	res := fleettest.RunForeignCensus(t, fleettest.CensusConfig{
		Config: fleettest.Config{
			Addr:    addr,
			AppName: "census-svc",
			NewApp: func(name string) *amqpactor.App {
				return amqpactor.New(b, amqpactor.WithName(name), amqpactor.WithLogger(log))
			},
		},
		Foreign: func(ctx context.Context, census amqpactor.Address) func() {
			return foreignConsumers(t, ctx, b, census, 20)
		},
		Window: 10 * time.Second,
	})
	fleettest.RequireSound(t, res, res.Published)
	require.Positive(t, res.Published)
	require.LessOrEqual(t, res.InWindow, 10, res.String())
	require.True(t, strings.Contains(logs.String(), "census="+protocol.CensusOf(addr).String()), "a warning names the census queue:\n%s", logs)
}

// foreignConsumers attaches n receivers to census on the in-process broker,
// as any client allowed to consume there could, and returns what detaches
// them.
func foreignConsumers(t *testing.T, ctx context.Context, b *inproc.Broker, census amqpactor.Address, n int) func() {
	t.Helper()
	conn, err := b.Connect(ctx)
	require.NoError(t, err)
	sess, err := conn.NewSession(ctx)
	require.NoError(t, err)
	for range n {
		r, err := sess.NewReceiver(ctx, transport.ReceiverOptions{Address: census, Credit: 1})
		require.NoError(t, err)
		require.NoError(t, r.IssueCredit(1))
	}
	return func() { require.NoError(t, conn.Close(context.Background())) }
}
