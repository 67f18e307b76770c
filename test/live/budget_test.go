package live

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/harness"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
)

// TestMaxInFlightBytesLive is issue 29's memory case on RabbitMQ 4, scaled
// down: 10 subscriptions with credit 256, 512 KiB messages, handlers that
// block, a budget of 16 MiB. The links hold their share of the budget and no
// more, whatever the credit; once the handlers return every message is
// handled.
func TestMaxInFlightBytesLive(t *testing.T) {
	u := brokerURL(t)
	const (
		subs, perQueue = 10, 16
		size           = 512 << 10
		limit          = 16 << 20
		bound          = limit + subs*size
		// Each link's share of the budget, in messages.
		share = limit / subs / size
	)
	app := amqpactor.New(amqpactor.Dial(u, amqpactor.WithDialect(amqpactor.RabbitMQ4)),
		amqpactor.WithMaxInFlightBytes(limit))
	blocked := harness.NewBlocker()
	qs := make([]amqpactor.Address, subs)
	for i := range qs {
		qs[i] = amqpactor.Queue(unique("live.budget"))
		t.Cleanup(func() { _ = brokeradmin.DeleteQueue(context.Background(), admin(t, u), qs[i].Name()) })
		_, err := app.Subscribe(qs[i], blocked.Handle, amqpactor.WithCredit(256))
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	defer blocked.Release()

	base := harness.HeapInuse()
	body := make([]byte, size)
	for _, q := range qs {
		for range perQueue {
			require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{Body: body}))
		}
	}
	body = nil

	// Every link holds its share and every credit granted has arrived.
	var tree *amqpactor.Node
	require.Eventually(t, func() bool {
		var err error
		tree, err = app.Tree(ctx)
		require.NoError(t, err)
		var delivered uint64
		for _, r := range harness.OfKind(tree, "receiver") {
			delivered += r.Counters["delivered"]
		}
		return delivered >= subs*share && tree.Counters["inflight_bytes"] == delivered*size
	}, 60*time.Second, 20*time.Millisecond)
	grown := int64(harness.HeapInuse()) - int64(base)
	var delivered uint64
	for _, r := range harness.OfKind(tree, "receiver") {
		delivered += r.Counters["delivered"]
	}
	t.Logf("handlers blocked: %d deliveries held, budget counter %d KiB (peak %d KiB), heap grown %.1f MiB",
		delivered, tree.Counters["inflight_bytes"]>>10, tree.Counters["inflight_bytes_peak"]>>10, float64(grown)/(1<<20))
	require.LessOrEqual(t, delivered, uint64(bound/size), "deliveries held at once")
	require.LessOrEqual(t, tree.Counters["inflight_bytes_peak"], uint64(bound), "the budget's counter never passed its bound")
	// The transfer and the handler's body of each, and 16 MiB for the rest.
	require.Less(t, grown, int64(2*bound+16<<20), "heap grown while the handlers block")

	blocked.Release()
	require.Eventually(t, func() bool { return blocked.Handled() == subs*perQueue }, 90*time.Second, 20*time.Millisecond)
	require.EqualValues(t, subs*perQueue, blocked.Handled(), "lost 0, none twice")
}
