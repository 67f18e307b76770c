package conformance

import (
	"context"
	"strings"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/messages"
)

func noop(context.Context, *amqpactor.Message) error { return nil }

// requireAddressError checks that err is an *AddressError naming a.
func (e *env) requireAddressError(err error, a amqpactor.Address, what string) *amqpactor.AddressError {
	e.Helper()
	var ae *amqpactor.AddressError
	require.ErrorAs(e, err, &ae, "%s %q: want an *AddressError", what, a.String())
	require.Equal(e, a, ae.Address, "%s: the error names another address", what)
	require.Contains(e, err.Error(), a.String(), "%s: the message does not name the address", what)
	return ae
}

// requireNothingAttached checks that app attached nothing: no subscription,
// no sender (and, with FaultHooks, no link on the broker for addrs).
func (e *env) requireNothingAttached(app *amqpactor.App, addrs []amqpactor.Address) {
	e.Helper()
	root := e.tree(app)
	require.Empty(e, ofKind(root, "subscription"), "a subscription with a bad address reached the tree:\n%s", treeText(root))
	require.Empty(e, ofKind(root, "sender"), "a sender with a bad address reached the tree:\n%s", treeText(root))
	if b, ok := e.hooks(); ok {
		for _, a := range addrs {
			require.Zero(e, b.Links(a), "a link to %s reached the broker", a)
		}
	}
}

// testAddressErrors: empty and malformed addresses fail Subscribe, Publish
// and Request with an *AddressError naming them, before anything reaches
// the wire.
func testAddressErrors(e *env) {
	bad := []amqpactor.Address{
		amqpactor.Queue(""),
		amqpactor.Queue("   "),
		amqpactor.Topic(""),
		amqpactor.Raw(""),
		amqpactor.Queue("a::"),
		amqpactor.Queue("::b"),
		amqpactor.Queue("a::b::c"),
		amqpactor.Topic("a::b"), // the fully qualified form names a queue
		amqpactor.Queue("has space"),
		amqpactor.Queue("line\nbreak"),
		{}, // the zero Address
	}
	// Before Start, Subscribe checks too.
	pre := e.newApp()
	for _, a := range bad {
		_, err := pre.Subscribe(a, noop)
		e.requireAddressError(err, a, "Subscribe before Start")
	}
	e.start(pre)

	app := e.startedApp()
	for _, a := range bad {
		_, err := app.Subscribe(a, noop)
		e.requireAddressError(err, a, "Subscribe")
		_, err = app.SubscribeBatch(a, func(context.Context, []*amqpactor.Message) error { return nil })
		e.requireAddressError(err, a, "SubscribeBatch")
		e.requireAddressError(app.Publish(e.ctx, a, msg("x")), a, "Publish")
		e.requireAddressError(app.Publish(e.ctx, a, msg("x"), amqpactor.Settled()), a, "settled Publish")
		_, err = app.Request(e.ctx, a, msg("x"))
		e.requireAddressError(err, a, "Request")
		_, err = app.Subscribe(e.queue("ok"), noop, amqpactor.WithRetry(amqpactor.RetryPolicy{RetryAddress: a}))
		if !a.IsZero() { // a zero RetryAddress means "no retry address"
			e.requireAddressError(err, a, "Subscribe with a retry address")
		}
	}
	// The one valid subscription above attached; nothing else did.
	root := e.tree(app)
	require.Len(e, ofKind(root, "subscription"), 1, "subscriptions in\n%s", treeText(root))
	require.Empty(e, ofKind(root, "sender"), "senders in\n%s", treeText(root))
	e.requireNothingAttached(pre, bad)
	if b, ok := e.hooks(); ok {
		for _, a := range bad {
			require.Zero(e, b.Links(a), "a link to %s reached the broker", a)
		}
	}
}

// dialectConnector is a connector that spells addresses in another dialect:
// it lets the suite check a dialect's address rules on any broker (the
// addresses fail before anything reaches the wire).
type dialectConnector struct {
	amqpactor.Connector
	dialect amqpactor.Dialect
}

func (c dialectConnector) Dialect() amqpactor.Dialect { return c.dialect }

// testAddressErrorsRabbitMQ4: in the RabbitMQ4 dialect the fully qualified
// "address::queue" form is an *AddressError from Subscribe, Publish and
// Request, and never reaches the wire.
func testAddressErrorsRabbitMQ4(e *env) {
	c := e.c
	if c.Dialect() != amqpactor.RabbitMQ4 {
		c = dialectConnector{Connector: e.c, dialect: amqpactor.RabbitMQ4}
	}
	app := e.newAppOn(c)
	fq := amqpactor.Queue("orders::billing")
	_, err := app.Subscribe(fq, noop)
	ae := e.requireAddressError(err, fq, "Subscribe before Start")
	require.Equal(e, amqpactor.RabbitMQ4, ae.Dialect)
	e.start(app)
	_, err = app.Subscribe(fq, noop)
	ae = e.requireAddressError(err, fq, "Subscribe")
	require.Equal(e, amqpactor.RabbitMQ4, ae.Dialect)
	require.Contains(e, err.Error(), "RabbitMQ4")
	e.requireAddressError(app.Publish(e.ctx, fq, msg("x")), fq, "Publish")
	_, err = app.Request(e.ctx, fq, msg("x"))
	e.requireAddressError(err, fq, "Request")
	e.requireNothingAttached(app, []amqpactor.Address{fq})
}

// refusedAddress returns an address the broker refuses to attach: with
// FaultHooks a queue under RefuseAttach, on RabbitMQ 4 a queue that does
// not exist (its /queues/NAME addresses need the queue to exist).
func (e *env) refusedAddress() amqpactor.Address {
	e.Helper()
	if b, ok := e.hooks(); ok {
		a := e.queue("refused")
		b.RefuseAttach(a, "amqp:not-found", "no such queue (refused by the test)")
		return a
	}
	if e.c.Dialect() == amqpactor.RabbitMQ4 {
		return amqpactor.Raw("/queues/" + e.unique("missing"))
	}
	e.Skipf("%s: no way to make the broker refuse an attach", e.f.Name)
	return amqpactor.Address{}
}

// testStartRefusedAttach: Start fails when the broker refuses an attach,
// naming the address, and the App is then stopped.
func testStartRefusedAttach(e *env) {
	refused := e.refusedAddress()
	app := e.newApp()
	e.subscribe(app, e.queue("fine"), noop)
	e.subscribe(app, refused, noop)
	err := app.Start(e.ctx)
	require.Error(e, err, "Start with a refused attach")
	require.Contains(e, err.Error(), refused.Name(), "the error does not name the address")
	var le *amqpactor.LinkError
	require.ErrorAs(e, err, &le, "a refused attach is a *LinkError")
	require.Contains(e, le.Address, strings.TrimPrefix(refused.Name(), "/queues/"))
	require.ErrorIs(e, app.Publish(e.ctx, e.queue("any"), msg("x")), amqpactor.ErrStopped, "a failed Start leaves the App stopped")
}

// testSubscribeRefusedAttach: after Start, Subscribe returns the refusal,
// naming the address, and the rest of the App goes on.
func testSubscribeRefusedAttach(e *env) {
	refused := e.refusedAddress()
	q := e.queue("fine")
	rec := &recorder{}
	app := e.startedApp()
	good := e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error { rec.add("h", m); return nil })
	sub, err := app.Subscribe(refused, noop)
	require.Error(e, err, "Subscribe with a refused attach")
	require.Nil(e, sub)
	require.Contains(e, err.Error(), refused.Name())
	var le *amqpactor.LinkError
	require.ErrorAs(e, err, &le)
	root := e.tree(app)
	subs := ofKind(root, "subscription")
	require.Len(e, subs, 1, "the refused subscription stays in the tree:\n%s", treeText(root))
	require.Equal(e, "subscription:"+good.Name(), subs[0].Name)
	e.publish(app, q, msg("still"))
	e.eventually(func() bool { return rec.count("still") == 1 }, "the other subscription still works")
}

// testPublishRejected: a publish the broker rejects returns an
// *OutcomeError with the broker's condition, naming the address; a settled
// publish there returns nil (at-most-once has no outcome); the sender goes
// on once the broker accepts again.
func testPublishRejected(e *env) {
	b := e.needHooks()
	q := e.queue("rejecting")
	rec := &recorder{}
	app := e.startedApp()
	e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error { rec.add("h", m); return nil })
	b.RejectPublish(q, "amqp:resource-limit-exceeded", "queue full (test)")
	err := app.Publish(e.ctx, q, msg("no"))
	var oe *amqpactor.OutcomeError
	require.ErrorAs(e, err, &oe)
	require.Equal(e, messages.Rejected, oe.Outcome.Kind)
	require.Equal(e, "amqp:resource-limit-exceeded", oe.Outcome.Condition)
	require.Equal(e, "queue full (test)", oe.Outcome.Description)
	require.Contains(e, oe.Address, q.Name())
	require.Contains(e, err.Error(), q.Name())
	require.NoError(e, app.Publish(e.ctx, q, msg("dropped"), amqpactor.Settled()), "a settled publish has no outcome")
	b.ClearRejects()
	e.publish(app, q, msg("yes"))
	e.eventually(func() bool { return rec.count("yes") == 1 }, "the publish after the rejections")
	e.stop(app)
	require.Zero(e, rec.count("no"))
	require.Zero(e, rec.count("dropped"))
	require.Equal(e, 1, rec.n())
}
