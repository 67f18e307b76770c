package receiver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/receiver"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/test/kit/faketransport"
	"github.com/amqpactor/amqpactor/test/kit/statetest"
	"github.com/amqpactor/amqpactor/transport"
)

// spawnUnder runs a receiver for spec on sess under a parent that spawns
// it with the App's strategy (as a subscription does); deliveries are
// accepted as they come.
func spawnUnder(t *testing.T, sys *actor.ActorSystem, env *actors.Env, sess transport.Session, spec *protocol.SubscriptionSpec) (parent, pid *actor.PID) {
	t.Helper()
	router := routeActor(sys, func(d *protocol.Delivery) { d.Settle(messages.Outcome{Kind: messages.Accepted}) })
	props := receiver.New(env, sess, spec, router, false, false)
	spawned := make(chan *actor.PID, 1)
	parent = sys.Root.Spawn(env.Props(func() actor.Actor {
		return actor.ReceiveFunc(func(c actor.Context) {
			if _, ok := c.Message().(*actor.Started); ok {
				spawned <- c.Spawn(props)
			}
		})
	}))
	t.Cleanup(func() { _ = sys.Root.PoisonFuture(router).Wait() })
	return parent, <-spawned
}

func state(t *testing.T, sys *actor.ActorSystem, pid *actor.PID) string {
	return faketransport.Describe(t, sys, pid).Node.State
}

// A receiver's link is attached, detached by the peer, and attached again
// after the backoff by the next incarnation, which receives on it: the
// state changes say so, in order. The first link ended soon after it
// attached, but once is no flapping: the second is attached at once.
func TestLinkLifeStates(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	env.LinkSettled = 200 * time.Millisecond
	var seen statetest.Changes
	env.OnState = seen.On
	fs := faketransport.OpenSession(t)
	var sess transport.Session = fs
	spec := &protocol.SubscriptionSpec{Address: address.Queue("q"), Credit: 8, Partitions: 1}
	parent, pid := spawnUnder(t, sys, env, sess, spec)

	require.Eventually(t, func() bool { return len(fs.Receivers()) == 1 }, faketransport.Bound, faketransport.Bound/1000)
	first := fs.Receivers()[0]
	require.True(t, first.Deliver(amqp.NewMessage([]byte("one"))))
	require.Eventually(t, func() bool { return len(first.Settlements()) == 1 }, faketransport.Bound, faketransport.Bound/1000)
	first.Detach("amqp:link:detach-forced", "test")

	require.Eventually(t, func() bool { return len(fs.Receivers()) == 2 }, faketransport.Bound, faketransport.Bound/1000,
		"the next incarnation attaches again")
	second := fs.Receivers()[1]
	require.True(t, second.Deliver(amqp.NewMessage([]byte("two"))))
	require.Eventually(t, func() bool { return len(second.Settlements()) == 1 }, faketransport.Bound, faketransport.Bound/1000,
		"it receives on the new link")
	require.Eventually(t, func() bool { return state(t, sys, pid) == protocol.StateAttached }, faketransport.Bound,
		faketransport.Bound/1000, "attached again")
	require.Equal(t, []string{
		">attaching", "attaching>attached",
		"attached>detached", "detached>restarting", // the link ended: the actor fails
		"restarting>attaching", "attaching>attached", // the next incarnation, after the backoff
	}, seen.List())

	require.NoError(t, faketransport.Drain(t, sys, pid))
	require.NoError(t, sys.Root.PoisonFuture(parent).Wait())
	require.Equal(t, []string{"attached>detached", "detached>stopped"}, seen.List()[6:])
}

// heldSession attaches receivers through its Gate.
type heldSession struct{ faketransport.Gate }

func (s *heldSession) NewSender(context.Context, transport.SenderOptions) (transport.Sender, error) {
	return nil, errors.New("fake: no senders")
}

func (s *heldSession) NewReceiver(ctx context.Context, _ transport.ReceiverOptions) (transport.Receiver, error) {
	if err := s.Pass(ctx); err != nil {
		return nil, err
	}
	return &fakeLink{msgs: make(chan *amqp.Message), done: make(chan struct{})}, nil
}

func (s *heldSession) Close(context.Context) error { return nil }

// The attach of an incarnation that panicked fails after the next one
// attached: the receiver is still attached, and says so.
func TestLateAttachFailureKeepsAttached(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	stale := errors.New("the dead incarnation's attach failed")
	sess := &heldSession{faketransport.Gate{Release: make(chan struct{}), First: stale}}
	spec := &protocol.SubscriptionSpec{Address: address.Queue("q"), Credit: 8, Partitions: 1}
	parent, pid := spawnUnder(t, sys, env, sess, spec)
	require.Eventually(t, func() bool { return sess.Calls.Load() == 1 }, faketransport.Bound, faketransport.Bound/1000)
	sys.Root.Send(pid, &testhook.Crash{Reason: "test"})
	require.Eventually(t, func() bool { return state(t, sys, pid) == protocol.StateAttached }, faketransport.Bound, faketransport.Bound/1000)

	close(sess.Release)
	require.Eventually(t, func() bool { return faketransport.Describe(t, sys, pid).Node.LastError == stale.Error() },
		faketransport.Bound, faketransport.Bound/1000, "the late failure reached the receiver")
	require.Equal(t, protocol.StateAttached, state(t, sys, pid))
	require.NoError(t, sys.Root.PoisonFuture(parent).Wait())
}

// A receiver drained while its attach is under way closes the link that
// attach brings, and says detached: no attach is under way any more.
func TestDrainedWhileAttachingShowsDetached(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	sess := &heldSession{faketransport.Gate{Release: make(chan struct{})}}
	spec := &protocol.SubscriptionSpec{Address: address.Queue("q"), Credit: 8, Partitions: 1}
	parent, pid := spawnUnder(t, sys, env, sess, spec)
	require.Eventually(t, func() bool { return sess.Calls.Load() == 1 }, faketransport.Bound, faketransport.Bound/1000)
	require.NoError(t, faketransport.Drain(t, sys, pid))
	require.Equal(t, protocol.StateAttaching, state(t, sys, pid))
	close(sess.Release)
	require.Eventually(t, func() bool { return state(t, sys, pid) == protocol.StateDetached }, faketransport.Bound, faketransport.Bound/1000)
	require.NoError(t, sys.Root.PoisonFuture(parent).Wait())
}

// A receiver handing its partition queue over stays handing-over whatever
// the broker says of the link meanwhile, until what it took is settled;
// then it detaches and attaches again at the back of the line.
func TestHandingOverIgnoresActivity(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	var seen statetest.Changes
	env.OnState = seen.On
	fs := faketransport.OpenSession(t)
	var sess transport.Session = fs
	spec := &protocol.SubscriptionSpec{Address: address.Partitioned("p", 2).Partition(1), Credit: 8, Partitions: 1}
	held := make(chan *protocol.Delivery, 1)
	router := routeActor(sys, func(d *protocol.Delivery) { held <- d })
	t.Cleanup(func() { _ = sys.Root.PoisonFuture(router).Wait() })
	props := receiver.New(env, sess, spec, router, false, false)
	spawned := make(chan *actor.PID, 1)
	parent := sys.Root.Spawn(env.Props(func() actor.Actor {
		return actor.ReceiveFunc(func(c actor.Context) {
			if _, ok := c.Message().(*actor.Started); ok {
				spawned <- c.Spawn(props)
			}
		})
	}))
	pid := <-spawned

	require.Eventually(t, func() bool { return state(t, sys, pid) == protocol.StateAttached }, faketransport.Bound, faketransport.Bound/1000)
	first := fs.Receivers()[0]
	require.True(t, first.Deliver(amqp.NewMessage([]byte("one"))))
	var d *protocol.Delivery
	select {
	case d = <-held:
	case <-time.After(faketransport.Bound):
		t.Fatal("the delivery never reached the handler")
	}
	sys.Root.Send(pid, &protocol.Handover{})
	require.Eventually(t, func() bool { return state(t, sys, pid) == receiver.StateHandingOver }, faketransport.Bound, faketransport.Bound/1000)

	first.Opts.OnActive(false) // the broker says another consumer is active
	n := faketransport.Describe(t, sys, pid).Node
	require.EqualValues(t, 0, n.Counters["active"], "what the broker said is shown")
	require.Equal(t, receiver.StateHandingOver, n.State, "the hand-over goes on")

	d.Settle(messages.Outcome{Kind: messages.Accepted})
	require.Eventually(t, func() bool { return len(fs.Receivers()) == 2 && state(t, sys, pid) == protocol.StateAttached },
		faketransport.Bound, faketransport.Bound/1000, "attached again after the hand-over")
	require.True(t, first.Closed())
	require.Equal(t, []string{
		">attaching", "attaching>attached", "attached>handing-over",
		"handing-over>detached", "detached>attaching", "attaching>attached",
	}, seen.List())
	require.NoError(t, faketransport.Drain(t, sys, pid))
	require.NoError(t, sys.Root.PoisonFuture(parent).Wait())
}
