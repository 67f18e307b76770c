package session_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/session"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/test/kit/faketransport"
)

// stopOnCrash is a strategy whose decider stops a child that panicked on
// testhook.Crash (a string) and restarts one that failed with an error (a
// link that ended): a test stops a sender as a spent budget would.
func stopOnCrash() actor.SupervisorStrategy {
	return actor.NewOneForOneStrategy(100, time.Minute, func(reason any) actor.Directive {
		if _, ok := reason.(string); ok {
			return actor.StopDirective
		}
		return actor.RestartDirective
	})
}

// failures records the StateChanges to failed.
type failures struct {
	mu  sync.Mutex
	got []protocol.StateChange
}

func (f *failures) on(sc protocol.StateChange) {
	if sc.To == actors.StateFailed {
		f.mu.Lock()
		f.got = append(f.got, sc)
		f.mu.Unlock()
	}
}

func (f *failures) list() []protocol.StateChange {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]protocol.StateChange(nil), f.got...)
}

// publishAsync hands a publish to pid and returns where its answer comes.
func (r *rig) publishAsync(ctx context.Context, a address.Address, body string, reply bool) <-chan error {
	done := make(chan error, 1)
	r.sys.Root.Send(r.pid, &protocol.Publish{Ctx: ctx, Address: a, Message: amqp.NewMessage([]byte(body)), Reply: reply, Done: done})
	return done
}

// childNamed returns the PID of pid's live child whose id contains name.
func (r *rig) childNamed(pid *actor.PID, name string) *actor.PID {
	r.t.Helper()
	for _, c := range faketransport.Describe(r.t, r.sys, pid).Children {
		if strings.Contains(c.Id, name) {
			return c
		}
	}
	return nil
}

func within(t *testing.T, done <-chan error, d time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s: no answer within %s", what, d)
		return nil
	}
}

// A sender its supervisor stops while publishes wait in it for a link (its
// backoff is a minute): they go to a new sender for the address at once and
// are sent; the publisher routes nothing to the dead PID, and its node no
// longer lists it.
func TestPublisherResendsWhatADeadSenderHeld(t *testing.T) {
	r := newRig(t, func(e *actors.Env) {
		e.Supervisor = stopOnCrash()
		e.Backoff = actors.Backoff{Initial: time.Minute, Max: time.Minute}
	})
	r.spawn(session.NewPublisher(r.env, session.NewSenders()))
	q := address.Queue("a")
	require.NoError(t, r.publish(q, "a0"))
	old := r.childNamed(r.pid, "sender:")
	require.NotNil(t, old)

	// The link ends under the next publish: the sender keeps it, waiting
	// a minute to attach again.
	r.conn.Sessions()[0].Senders()[0].Detach("amqp:link:detach-forced", "gone")
	ctx, cancel := context.WithTimeout(context.Background(), faketransport.Bound)
	defer cancel()
	a1 := r.publishAsync(ctx, q, "a1", false)
	require.Eventually(t, func() bool {
		return faketransport.Describe(t, r.sys, old).Node.Counters["waiting"] == 1
	}, faketransport.Bound, tick, "a1 waits in the sender")

	r.sys.Root.Send(old, &testhook.Crash{Reason: "test"})
	require.NoError(t, within(t, a1, 2*time.Second, "a1, held by a sender that was stopped"))
	require.NoError(t, within(t, r.publishAsync(ctx, q, "a2", false), 2*time.Second, "a2, after the sender was stopped"))
	require.Equal(t, []string{"a0", "a1", "a2"}, r.sent()["a"])

	_, alive := r.sys.ProcessRegistry.GetLocal(old.Id)
	require.False(t, alive)
	for _, c := range faketransport.Describe(t, r.sys, r.pid).Children {
		require.NotEqual(t, old.Id, c.Id, "the publisher lists a dead sender")
	}
}

// A sender for one address stopped by its supervisor again and again: the
// publisher starts a new one each time within its restart budget (10 a
// minute), then reports the sender failed and fails publishes to that
// address at once with a NodeError naming it; other addresses still work.
func TestPublisherSenderRestartBudgetHolds(t *testing.T) {
	var f failures
	r := newRig(t, func(e *actors.Env) {
		e.Supervisor = stopOnCrash()
		e.OnState = f.on
	})
	r.spawn(session.NewPublisher(r.env, session.NewSenders()))
	q := address.Queue("a")
	for i := range 11 {
		require.NoError(t, r.publish(q, fmt.Sprint("a", i)), "publish %d", i)
		pid := r.childNamed(r.pid, "sender:")
		require.NotNil(t, pid)
		r.sys.Root.Send(pid, &testhook.Crash{Reason: "test"})
		require.Eventually(t, func() bool { return r.childNamed(r.pid, "sender:") == nil }, faketransport.Bound, tick)
	}
	ctx, cancel := context.WithTimeout(context.Background(), faketransport.Bound)
	defer cancel()
	t0 := time.Now()
	err := within(t, r.publishAsync(ctx, q, "late", false), time.Second, "a publish past the budget")
	require.Less(t, time.Since(t0), 500*time.Millisecond)
	var ne *protocol.NodeError
	require.ErrorAs(t, err, &ne)
	require.Equal(t, "connection/publisher/sender:a", ne.Path)
	require.Equal(t, q.String(), ne.Address)
	require.Len(t, f.list(), 1, "one StateChange to failed")
	require.Equal(t, "connection/publisher/sender:a", f.list()[0].Path)
	require.NoError(t, r.publish(address.Queue("b"), "b0"), "another address still works")
	d := faketransport.Describe(t, r.sys, r.pid)
	require.Len(t, d.Gone, 1, "the failed sender is drawn as failed")
	require.Equal(t, actors.StateFailed, d.Gone[0].State)
}

// The replies publisher stopped by its supervisor: the publisher starts it
// again, and the next reply goes out at once.
func TestPublisherStartsTheRepliesPublisherAgain(t *testing.T) {
	r := newRig(t, func(e *actors.Env) { e.Supervisor = stopOnCrash() })
	r.spawn(session.NewPublisher(r.env, session.NewSenders()))
	q := address.Queue("reply-to")
	require.NoError(t, within(t, r.publishAsync(context.Background(), q, "r0", true), faketransport.Bound, "r0"))
	replies := r.childNamed(r.pid, "replies")
	require.NotNil(t, replies)
	r.sys.Root.Send(replies, &testhook.Crash{Reason: "test"})
	ctx, cancel := context.WithTimeout(context.Background(), faketransport.Bound)
	defer cancel()
	require.Eventually(t, func() bool {
		d := r.childNamed(r.pid, "replies")
		if d == nil {
			return false
		}
		_, alive := r.sys.ProcessRegistry.GetLocal(d.Id)
		return alive
	}, faketransport.Bound, tick)
	err := within(t, r.publishAsync(ctx, q, "r1", true), 2*time.Second, "a reply after the replies publisher was stopped")
	require.False(t, errors.Is(err, context.DeadlineExceeded))
	require.NoError(t, err)
}
