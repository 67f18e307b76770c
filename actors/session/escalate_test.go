package session_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors/session"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/faketransport"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
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
	spec := &protocol.SubscriptionSpec{Name: "s", Address: address.Queue("q"), Credit: 8, Partitions: 1,
		Handler: func(context.Context, *messages.Message) error { return nil },
		Outcome: func(context.Context, error, *messages.Message) messages.Outcome {
			return messages.Outcome{Kind: messages.Accepted}
		}}
	started := make(chan error, 1)
	children := make(chan *actor.PID, 1)
	reconnects := make(chan *protocol.Reconnect, 16) // asked, never done
	pp := r.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &parent{props: session.NewSubscription(r.env, spec, started), child: children, reconnects: reconnects}
	}))
	defer func() { _ = r.sys.Root.PoisonFuture(pp).Wait() }()
	r.pid = <-children
	defer func() { _ = faketransport.Drain(t, r.sys, r.pid) }()
	r.sys.Root.Send(r.pid, &protocol.ConnUp{Conn: r.conn})
	select {
	case err := <-started:
		require.NoError(t, err)
	case <-time.After(faketransport.Bound):
		t.Fatal("the first attach was never answered")
	}
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
