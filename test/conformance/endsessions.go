package conformance

import (
	"context"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/address"
)

// testEndSessions (FaultHooks): the broker ends sessions while publishers
// are busy: first the publisher's and the subscription's sessions (those
// with a link on the queue), then every session, the requests' one
// included. Every Publish returns nil, every message is handled at least
// once (a redelivery is a counted duplicate, never a loss), and publishing,
// consuming and request/reply work again afterwards.
func testEndSessions(e *env) {
	b := e.needHooks()
	q := e.queue("endsessions")
	rpc := e.queue("endsessions-rpc")
	rec := &recorder{}
	app := e.startedApp()
	e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error { rec.add("h", m); return nil })
	e.subscribe(app, rpc, amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: append([]byte("re:"), req.Body...)}, nil
	}))
	rep, err := app.Request(e.ctx, rpc, &amqpactor.Message{Body: []byte("before")})
	require.NoError(e, err, "request before the fault")
	require.Equal(e, "re:before", string(rep.Body))

	const publishers, each = 8, 100
	ended := e.gate()
	finished, errs := e.publishHalves(app, q, publishers, each, ended)
	e.eventually(func() bool { return rec.distinct() == publishers*each/2 }, "the first halves handled")
	ended.open()
	require.GreaterOrEqual(e, b.EndSessions(q, "amqp:internal-error", "test end session"), 2,
		"the publisher's and the subscription's sessions ended")
	e.await(finished, "the publishers to finish")
	for err := range errs {
		require.NoError(e, err, "a publish across the session end")
	}
	e.eventually(func() bool { return rec.distinct() == publishers*each }, "every message at least once")

	// every session, the requests' one too
	require.NotZero(e, b.EndSessions(address.Address{}, "amqp:internal-error", "test end all"))
	// A request in flight when its reply link ends fails by design (its
	// reply could not reach it): the next one, once the requests actor has
	// seen the end, attaches a new reply link on a new session.
	e.eventually(func() bool {
		root, err := treeOf(app)
		if err != nil {
			return false
		}
		rs := ofKind(root, "requests")
		return len(rs) == 1 && rs[0].State != "attached"
	}, "the requests actor to see its session end")
	rep, err = app.Request(e.ctx, rpc, &amqpactor.Message{Body: []byte("after")})
	require.NoError(e, err, "request after every session ended")
	require.Equal(e, "re:after", string(rep.Body))
	after := ids("after", 20)
	e.publishIDs(app, q, after)
	e.eventually(func() bool { return rec.hasAll(after) }, "every message after the second fault handled")
	e.drained(b, q)
	e.eventually(func() bool { return attached(app, "publisher", "subscription", "requests", "sender", "receiver") },
		"every session and link attached again")
	root := e.tree(app)
	// A subscription replaces its session (and its receiver) when the
	// session ends: it counts that as a restart.
	for _, n := range ofKind(root, "subscription") {
		require.GreaterOrEqual(e, n.Restarts, 1, "a subscription never saw its session end:\n%s", treeText(root))
		require.Contains(e, n.LastError, "test end", treeText(root))
	}
	e.stop(app)
	dups := rec.n() - rec.distinct()
	e.Logf("end sessions: %d handled, %d distinct, %d duplicates", rec.n(), rec.distinct(), dups)
	require.Equal(e, publishers*each+len(after), rec.distinct(), "lost or unknown messages")
}
