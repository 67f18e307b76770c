package conformance

import (
	"context"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// testCompetingApps: two Apps on one queue compete; every message is handled
// exactly once in total, and both get a share.
func testCompetingApps(e *env) {
	q := e.queue("compete")
	rec := &recorder{}
	h := func(who string) amqpactor.Handler {
		return func(ctx context.Context, m *amqpactor.Message) error {
			rec.add(who, m)
			return nil
		}
	}
	// One subscribes before Start (Start attaches it), one after (it
	// attaches at once).
	a1 := e.newApp()
	e.subscribe(a1, q, h("a1"))
	e.start(a1)
	a2 := e.startedApp()
	e.subscribe(a2, q, h("a2"))

	want := ids("m", 200)
	for _, id := range want {
		e.publish(a1, q, msg(id))
	}
	e.eventually(func() bool { return rec.distinct() == len(want) }, "every message handled")
	// Stopping settles what is in flight; nothing may come again.
	e.stop(a1)
	e.stop(a2)
	e.requireEachOnce(rec, want)
	require.NotZero(e, rec.by("a1"), "the first app got no message: receivers do not compete")
	require.NotZero(e, rec.by("a2"), "the second app got no message: receivers do not compete")
}

// testCompetingSubscriptions: two subscriptions of one App on one queue
// compete like two Apps.
func testCompetingSubscriptions(e *env) {
	q := e.queue("compete2")
	rec := &recorder{}
	app := e.startedApp()
	s1 := e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error { rec.add("s1", m); return nil })
	s2 := e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error { rec.add("s2", m); return nil })
	require.NotEqual(e, s1.Name(), s2.Name(), "two subscriptions on one address need distinct names")

	want := ids("m", 200)
	for _, id := range want {
		e.publish(app, q, msg(id))
	}
	e.eventually(func() bool { return rec.distinct() == len(want) }, "every message handled")
	e.stop(app)
	e.requireEachOnce(rec, want)
	require.NotZero(e, rec.by("s1"), "the first subscription got no message")
	require.NotZero(e, rec.by("s2"), "the second subscription got no message")
}

// testTopicFanOut: every subscription of a topic, in one App or another,
// gets its own copy of every message.
func testTopicFanOut(e *env) {
	tp := e.topic("events")
	rec := &recorder{}
	h := func(who string) amqpactor.Handler {
		return func(ctx context.Context, m *amqpactor.Message) error {
			rec.add(who, m)
			return nil
		}
	}
	a := e.startedApp()
	e.subscribe(a, tp, h("a1"))
	e.subscribe(a, tp, h("a2"))
	b := e.startedApp()
	e.subscribe(b, tp, h("b1"))

	want := ids("ev", 50)
	for _, id := range want {
		e.publish(b, tp, msg(id))
	}
	e.eventually(func() bool { return rec.n() >= 3*len(want) }, "every subscription got every message")
	e.stop(a)
	e.stop(b)
	for _, who := range []string{"a1", "a2", "b1"} {
		require.Equal(e, len(want), rec.by(who), "copies handled by %s", who)
	}
	for _, id := range want {
		calls := rec.of(id)
		require.Len(e, calls, 3, "copies of %s", id)
		got := map[string]int{}
		for _, c := range calls {
			got[c.who]++
		}
		require.Equal(e, map[string]int{"a1": 1, "a2": 1, "b1": 1}, got, "copies of %s", id)
	}
}

// testSettledPublish: a settled (at-most-once) publish returns once written
// and still arrives.
func testSettledPublish(e *env) {
	q := e.queue("settled")
	rec := &recorder{}
	app := e.startedApp()
	e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error { rec.add("h", m); return nil })
	want := ids("s", 50)
	for _, id := range want {
		e.publish(app, q, msg(id), amqpactor.Settled())
	}
	e.eventually(func() bool { return rec.distinct() == len(want) }, "settled publishes arrive")
	e.stop(app)
	e.requireEachOnce(rec, want)
}
