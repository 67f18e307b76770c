package receiver_test

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors/receiver"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/test/harness"
	"github.com/amqpactor/amqpactor/test/kit/faketransport"
	"github.com/amqpactor/amqpactor/test/kit/statetest"
	"github.com/amqpactor/amqpactor/transport"
)

// A peer that detaches every link as soon as it is attached: each link
// after the second shows degraded, never attached (one short-lived link is
// an ordinary detach); past the restart budget
// of the default strategy (10 a minute) the receiver is told so and waits
// the longest backoff; the link that stays attached for the settled period
// is attached again.
func TestFlappingLinkIsDegradedUntilALinkSettles(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	env.LinkSettled = time.Second
	logs := &harness.LogBuffer{}
	env.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var seen statetest.Changes
	env.OnState = seen.On
	fs := faketransport.OpenSession(t)
	var sess transport.Session = fs
	spec := &protocol.SubscriptionSpec{Address: address.Queue("q"), Credit: 8, Partitions: 1}
	parent, pid := spawnUnder(t, sys, env, sess, spec)

	const flaps = 12
	for i := range flaps {
		require.Eventually(t, func() bool { return len(fs.Receivers()) == i+1 }, faketransport.Bound, time.Millisecond,
			"attach %d", i+1)
		if i > 1 {
			require.NotEqual(t, protocol.StateAttached, state(t, sys, pid), "attached while flapping (link %d)", i+1)
		}
		fs.Receivers()[i].Detach("amqp:link:detach-forced", "flapping")
	}
	require.Eventually(t, func() bool { return bytes.Contains([]byte(logs.String()), []byte("longest backoff")) },
		faketransport.Bound, time.Millisecond, "the strategy found the short-lived links past the budget: %s", logs.String())
	var attached, degraded int
	for _, c := range seen.List() {
		switch c {
		case "attaching>attached":
			attached++
		case "attaching>degraded":
			degraded++
		}
	}
	require.Equal(t, 2, attached, "only the first two links are attached at once: %v", seen.List())
	require.GreaterOrEqual(t, degraded, flaps-2, "%v", seen.List())

	// The broker keeps the next link: attached once it has settled.
	require.Eventually(t, func() bool { return len(fs.Receivers()) == flaps+1 }, 3*env.Backoff.Max+faketransport.Bound,
		time.Millisecond, "it attaches again after the longest backoff")
	require.Equal(t, receiver.StateDegraded, state(t, sys, pid))
	require.Eventually(t, func() bool { return state(t, sys, pid) == protocol.StateAttached }, faketransport.Bound,
		time.Millisecond, "attached once the link has stayed attached for the settled period")
	require.Equal(t, "degraded>attached", seen.List()[len(seen.List())-1])

	require.NoError(t, faketransport.Drain(t, sys, pid))
	require.NoError(t, sys.Root.PoisonFuture(parent).Wait())
}
