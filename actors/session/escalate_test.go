package session_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/test/kit/faketransport"
)

// The connection may decline a subscription's request to reconnect (it is
// brand new, or was condemned once already): the subscription then keeps
// retrying its session with backoff and attaches once the broker lets it.
// It used to wait in restarting for a reconnect that never came.
func TestSubscriptionRetriesWhenTheReconnectIsDeclined(t *testing.T) {
	r := newRig(t, nil)
	var failing atomic.Bool
	failing.Store(true)
	r.c.OnSession = func(s *faketransport.Session) {
		if len(r.conn.Sessions()) > 1 && failing.Load() {
			s.End("amqp:internal-error", "ended at once")
		}
	}
	spec := acceptingSpec(1, nil)
	reconnects := make(chan *protocol.Reconnect, 16) // asked, never done
	started := r.underParent(spec, reconnects)
	attached(t, started)
	r.conn.Sessions()[0].End("amqp:internal-error", "session gone")
	select {
	case <-reconnects:
	case <-time.After(faketransport.Bound):
		t.Fatal("the subscription never asked for a reconnect")
	}
	failing.Store(false)
	require.Eventually(t, func() bool { return r.node().State == protocol.StateAttached }, faketransport.Bound, tick,
		"attached again on the same connection after the declined reconnect: %s", r.node().State)
}
