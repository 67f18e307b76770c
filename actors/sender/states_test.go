package sender_test

import (
	"context"
	"sync"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors/sender"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/faketransport"
	"github.com/amqpactor/amqpactor/internal/protocol"
)

// changes records the state changes an actor reports, as "from>to".
type changes struct {
	mu  sync.Mutex
	got []string
}

func (c *changes) on(sc protocol.StateChange) {
	c.mu.Lock()
	c.got = append(c.got, sc.From+">"+sc.To)
	c.mu.Unlock()
}

func (c *changes) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

func publish(t *testing.T, sys *actor.ActorSystem, pid *actor.PID, body string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faketransport.Bound)
	defer cancel()
	done := make(chan error, 1)
	sys.Root.Send(pid, &protocol.Publish{Ctx: ctx, Address: address.Queue("q"), Message: amqp.NewMessage([]byte(body)), Done: done})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		t.Fatalf("publish %q never answered", body)
		return nil
	}
}

// A sender's link is attached, detached by the peer under a publish, and
// attached again after the backoff by the next incarnation, which sends
// the publish: the state changes say so, in order.
func TestLinkLifeStates(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	var seen changes
	env.OnState = seen.on
	conn, err := (&faketransport.Connector{}).Connect(context.Background())
	require.NoError(t, err)
	sess, err := conn.NewSession(context.Background())
	require.NoError(t, err)
	fs := sess.(*faketransport.Session)

	spawned := make(chan *actor.PID, 1)
	ppid := sys.Root.Spawn(env.Props(func() actor.Actor {
		return actor.ReceiveFunc(func(c actor.Context) {
			if _, ok := c.Message().(*actor.Started); ok {
				spawned <- c.Spawn(sender.New(env, sender.Config{Address: address.Queue("q"), Session: sess}))
			}
		})
	}))
	pid := <-spawned

	require.NoError(t, publish(t, sys, pid, "one"))
	fs.Senders()[0].Detach("amqp:link:detach-forced", "test")
	require.NoError(t, publish(t, sys, pid, "two"), "sent again on the next link")

	ls := fs.Senders()
	require.Len(t, ls, 2, "one link per incarnation")
	require.Len(t, ls[1].Sent(), 1)
	require.Equal(t, "two", string(ls[1].Sent()[0].GetData()))
	require.Equal(t, []string{
		">detached", "detached>attaching", "attaching>attached",
		"attached>detached", "detached>restarting", // the link ended with a publish waiting
		"restarting>attaching", "attaching>attached", // the next incarnation, after the backoff
	}, seen.list())
	require.Equal(t, protocol.StateAttached, faketransport.Describe(t, sys, pid).Node.State)

	require.NoError(t, faketransport.Drain(t, sys, pid))
	require.NoError(t, sys.Root.PoisonFuture(ppid).Wait())
	require.Equal(t, []string{"attached>detached", "detached>stopped"}, seen.list()[7:])
}

// A sender drained while its attach is under way closes the link that
// attach brings, and says detached: no attach is under way any more.
func TestDrainedWhileAttachingShowsDetached(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	sess := &fakeSession{hold: true, release: make(chan struct{})}
	pid := sys.Root.Spawn(sender.New(env, sender.Config{Address: address.Queue("q"), Session: sess}))
	ctx, cancel := context.WithTimeout(context.Background(), faketransport.Bound)
	defer cancel()
	done := make(chan error, 1)
	sys.Root.Send(pid, &protocol.Publish{Ctx: ctx, Address: address.Queue("q"), Message: amqp.NewMessage([]byte("x")), Done: done})
	require.Eventually(t, func() bool { return sess.calls.Load() == 1 }, faketransport.Bound, faketransport.Bound/1000)
	require.NoError(t, faketransport.Drain(t, sys, pid))
	require.ErrorIs(t, <-done, protocol.ErrStopped)
	require.Equal(t, protocol.StateAttaching, faketransport.Describe(t, sys, pid).Node.State)
	close(sess.release)
	require.Eventually(t, func() bool {
		return faketransport.Describe(t, sys, pid).Node.State == protocol.StateDetached
	}, faketransport.Bound, faketransport.Bound/1000)
	require.NoError(t, sys.Root.PoisonFuture(pid).Wait())
}
