package conformance

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// testDetachRedelivers (FaultHooks): the broker detaches a receiver while a
// handler holds a delivery; the receiver re-attaches, the delivery comes
// again with first-acquirer false, and the first handler's late disposition
// is dropped, not sent on the new link.
func testDetachRedelivers(e *env) {
	b := e.needHooks()
	q := e.queue("detach")
	rec := &recorder{}
	holding := e.gate()
	release := e.gate()
	var lateReturned atomic.Bool
	app := e.startedApp()
	sub := e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		rec.add("h", m)
		if m.MessageID == "held" && len(rec.of("held")) == 1 {
			holding.open()
			release.wait()
			lateReturned.Store(true)
		}
		return nil
	})
	e.publish(app, q, msg("held"))
	e.await(holding, "the handler to hold the delivery")
	require.NotZero(e, b.DetachLinks(q, "amqp:internal-error", "test detach"), "links detached")

	e.eventually(func() bool { return rec.count("held") == 2 }, "the held delivery redelivered on the new link")
	calls := rec.of("held")
	e.firstAcquirer(calls[0].m, true, "the first delivery")
	require.False(e, calls[1].m.FirstAcquirer, "a redelivery has first-acquirer false")
	release.open()
	e.eventually(lateReturned.Load, "the first handler to return")
	e.eventually(func() bool { return counters(app, sub)["late"] == 1 }, "the late disposition counted as dropped")

	root := e.tree(app)
	r := receiverOf(root, sub)
	require.NotNil(e, r, treeText(root))
	require.Equal(e, "attached", r.State, treeText(root))
	require.GreaterOrEqual(e, r.Restarts, 1, treeText(root))
	require.Contains(e, r.LastError, "test detach", treeText(root))
	require.EqualValues(e, 1, r.Counters["accepted"], "only the redelivery is settled: %v", r.Counters)

	e.publish(app, q, msg("after"))
	e.eventually(func() bool { return rec.count("after") == 1 }, "a message after the re-attach")
	e.eventually(func() bool { return b.Unsettled(q.Name()) == 0 }, "nothing out for delivery")
	require.Zero(e, b.QueueDepth(q.Name()))
	require.Empty(e, b.DeadLetters(q.Name()))
	e.stop(app)
	require.Len(e, rec.of("held"), 2)
}

// testSenderDetach (FaultHooks): links detached as busy publishers start the
// second half of their work: every Publish still returns nil (what was not
// written is sent on a new link) and every message arrives at least once.
func testSenderDetach(e *env) {
	b := e.needHooks()
	q := e.queue("senderdetach")
	rec := &recorder{}
	app := e.startedApp()
	sub := e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error { rec.add("h", m); return nil })

	const publishers, each = 16, 100
	detached := e.gate()
	finished, errs := e.publishHalves(app, q, publishers, each, detached)
	e.eventually(func() bool { return rec.distinct() == publishers*each/2 }, "the first halves handled")
	// The second halves start as the links die: some publishes meet the
	// dead link, others queue behind it. While they go on, the links die
	// again as soon as they are back, a few times: the window between a
	// link's death and the sender noticing it is short.
	detached.open()
	require.Equal(e, 2, b.DetachLinks(q, "amqp:internal-error", "test detach"), "the sender and the receiver detached")
	for range 10 {
		e.eventually(func() bool { return finished.isOpen() || b.Links(q) == 2 }, "the links back")
		if finished.isOpen() {
			break
		}
		b.DetachLinks(q, "amqp:internal-error", "test detach")
	}
	e.await(finished, "the publishers to finish")
	for err := range errs {
		require.NoError(e, err, "a publish across the detach")
	}
	e.eventually(func() bool { return rec.distinct() == publishers*each }, "every message at least once")
	e.drained(b, q)
	e.eventually(func() bool {
		root, err := treeOf(app)
		if err != nil {
			return false
		}
		r, s := receiverOf(root, sub), ofKind(root, "sender")
		return r != nil && r.State == "attached" && len(s) == 1 && s[0].State == "attached"
	}, "the receiver and the sender attached again")
	root := e.tree(app)
	require.GreaterOrEqual(e, receiverOf(root, sub).Restarts, 1, treeText(root))
	sender := ofKind(root, "sender")[0]
	require.GreaterOrEqual(e, sender.Restarts, 1, "the sender never saw its link end:\n%s", treeText(root))
	require.Contains(e, sender.LastError, "test detach", treeText(root))
}

// testReconnect (FaultHooks): the connection drops; the App reconnects,
// re-attaches its subscription, redelivers what was held, and publishing
// and request/reply work again.
func testReconnect(e *env) {
	b := e.needHooks()
	q := e.queue("reconnect")
	rpc := e.queue("reconnect-rpc")
	rec := &recorder{}
	holding := e.gate()
	release := e.gate()
	app := e.startedApp()
	e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		rec.add("h", m)
		if m.MessageID == "held" && len(rec.of("held")) == 1 {
			holding.open()
			release.wait()
		}
		return nil
	})
	e.subscribe(app, rpc, amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: []byte("pong")}, nil
	}))
	_, err := app.Request(e.ctx, rpc, &amqpactor.Message{Body: []byte("ping")})
	require.NoError(e, err, "request before the drop")
	before := ids("before", 10)
	e.publishIDs(app, q, before)
	e.publish(app, q, msg("held"))
	e.await(holding, "the handler to hold a delivery")

	require.Equal(e, 1, b.DropConnections(errors.New("test drop")), "connections dropped")
	e.eventually(func() bool {
		root, err := treeOf(app)
		return err == nil && root.State == "attached" && root.Restarts == 1
	}, "the connection back")
	e.eventually(func() bool { return rec.count("held") == 2 }, "the held delivery redelivered after the reconnect")
	require.False(e, rec.of("held")[1].m.FirstAcquirer)
	release.open()

	after := ids("after", 10)
	e.publishIDs(app, q, after)
	e.eventually(func() bool { return rec.hasAll(append(before, after...)) }, "every message handled")
	rep, err := app.Request(e.ctx, rpc, &amqpactor.Message{Body: []byte("ping")})
	require.NoError(e, err, "request after the reconnect")
	require.Equal(e, "pong", string(rep.Body))
	e.drained(b, q)
	e.stop(app)
	require.Len(e, rec.of("held"), 2, "the held message: once before the drop, once after")
}
