package conformance

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/internal/testhook"
)

// streamed records, per subscription, the message-ids it handled and the
// offset each one carried, in the order they came.
type streamed struct {
	mu   sync.Mutex
	ids  []string
	offs []int64
	bad  []string // deliveries without a readable offset
}

func (s *streamed) handle(_ context.Context, m *amqpactor.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = append(s.ids, fmt.Sprint(m.MessageID))
	off, ok := m.Annotations["x-stream-offset"].(int64)
	if !ok {
		s.bad = append(s.bad, fmt.Sprintf("%v: x-stream-offset %T %v", m.MessageID, m.Annotations["x-stream-offset"], m.Annotations["x-stream-offset"]))
	}
	s.offs = append(s.offs, off)
	return nil
}

func (s *streamed) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

func (s *streamed) got() ([]string, []int64, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ids...), append([]int64(nil), s.offs...), append([]string(nil), s.bad...)
}

// ignore handles a delivery by doing nothing.
func ignore(context.Context, *amqpactor.Message) error { return nil }

// streamIDs names n messages prefix-0 … prefix-(n-1).
func streamIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return ids
}

// readsExactly waits until r has handled len(want) messages, then a little
// longer for any it should not get, and requires exactly want, in order
// (one partition), each with an offset one past the one before.
func (e *env) readsExactly(r *streamed, want []string, what string) []int64 {
	e.Helper()
	e.eventually(func() bool { return r.count() >= len(want) }, "%s: %d of %d messages", what, r.count(), len(want))
	time.Sleep(300 * time.Millisecond)
	ids, offs, bad := r.got()
	require.Empty(e, bad, "%s: every delivery carries its offset as an int64", what)
	require.Equal(e, want, ids, "%s: exactly these, in order", what)
	for i := 1; i < len(offs); i++ {
		require.Equal(e, offs[i-1]+1, offs[i], "%s: offsets follow one another", what)
	}
	return offs
}

// testStreamOffsets: subscriptions to one stream from the first message,
// from an offset, from a time, from the last and from the next read
// exactly what each should, every delivery showing its offset in
// x-stream-offset. Without Features.Streams, Subscribe fails naming the
// address.
func testStreamOffsets(e *env) {
	st := e.stream("stream")
	app := e.startedApp()
	if !e.f.Features.Streams {
		_, err := app.Subscribe(st, ignore, amqpactor.WithStreamOffset(amqpactor.StreamFirst()))
		require.Error(e, err, "a stream on a broker without streams")
		require.Contains(e, err.Error(), st.String(), "the error names the address")
		return
	}
	_, err := app.Subscribe(amqpactor.Queue(e.unique("q")), ignore, amqpactor.WithStreamOffset(amqpactor.StreamFirst()))
	require.Error(e, err, "a stream offset for a queue")

	next := &streamed{}
	e.subscribe(app, st, next.handle, amqpactor.WithPartitions(1), amqpactor.WithSubscriptionName("next"))
	// The first subscription declares the stream before anything is
	// published to it.
	before := streamIDs("a", 60)
	e.publishIDs(app, st, before)
	// RabbitMQ finds a time by its chunks' arrival times, approximately
	// (docs: "the approximate point in time"): a wide gap on either side.
	time.Sleep(3 * time.Second)
	since := time.Now()
	time.Sleep(3 * time.Second)
	after := streamIDs("b", 20)
	e.publishIDs(app, st, after)
	all := append(append([]string(nil), before...), after...)

	offs := e.readsExactly(next, all, "from next")
	first := &streamed{}
	e.subscribe(app, st, first.handle, amqpactor.WithPartitions(1), amqpactor.WithSubscriptionName("first"),
		amqpactor.WithStreamOffset(amqpactor.StreamFirst()))
	require.Equal(e, offs, e.readsExactly(first, all, "from first"), "the same offsets for the same messages")

	at := &streamed{}
	e.subscribe(app, st, at.handle, amqpactor.WithPartitions(1), amqpactor.WithSubscriptionName("at"),
		amqpactor.WithStreamOffset(amqpactor.StreamAt(offs[40])))
	e.readsExactly(at, all[40:], "from an offset")

	ts := &streamed{}
	e.subscribe(app, st, ts.handle, amqpactor.WithPartitions(1), amqpactor.WithSubscriptionName("since"),
		amqpactor.WithStreamOffset(amqpactor.StreamSince(since)))
	e.readsExactly(ts, after, fmt.Sprintf("from a time (%s, %d ms)", since.Format(time.RFC3339Nano), since.UnixMilli()))

	last := &streamed{}
	e.subscribe(app, st, last.handle, amqpactor.WithPartitions(1), amqpactor.WithSubscriptionName("last"),
		amqpactor.WithStreamOffset(amqpactor.StreamLast()))
	e.eventually(func() bool { return last.count() >= 1 }, "from last: the last chunk")
	ids, _, _ := last.got()
	require.Equal(e, all[len(all)-1], ids[len(ids)-1], "from last: ends with the last message")
	require.LessOrEqual(e, len(ids), len(after), "from last: the last chunk only")
}

// testStreamFilter: subscriptions from the first message with filter
// values handle exactly the messages that carry one of them, in order,
// whatever the broker's bloom filter lets through; with
// Features.StreamPropertyFilters, those with header and property filters
// exactly the messages that hold them; with Features.StreamSQL, those with
// an SQL filter exactly the messages it is TRUE of.
func testStreamFilter(e *env) {
	if !e.f.Features.Streams {
		e.Skip("the broker has no streams (Features.Streams): testStreamOffsets asserts the error")
	}
	st := e.stream("filtered")
	app := e.startedApp()
	_, err := app.Subscribe(amqpactor.Queue(e.unique("q")), ignore, amqpactor.WithStreamFilterValues("eu"))
	require.Error(e, err, "filter values for a queue")
	_, err = app.Subscribe(amqpactor.Queue(e.unique("q")), ignore, amqpactor.WithStreamHeaders(map[string]string{"a": "b"}))
	require.Error(e, err, "a header filter for a queue")
	_, err = app.Subscribe(amqpactor.Queue(e.unique("q")), ignore, amqpactor.WithStreamSQL("a = 'b'"))
	require.Error(e, err, "an SQL filter for a queue")
	_, err = app.Subscribe(st, ignore, amqpactor.WithStreamHeaders(map[string]string{"kind": "&p:ord"}))
	require.Error(e, err, "a header value RabbitMQ would read as a prefix match")
	_, err = app.Subscribe(st, ignore, amqpactor.WithStreamProperties(map[string]string{"creation-time": "0"}))
	require.ErrorContains(e, err, st.String(), "a property the filter cannot match")
	_, err = app.Subscribe(st, ignore, amqpactor.WithStreamSQL("kind = 'order' and n > 1"))
	require.ErrorContains(e, err, st.String(), "an SQL filter that does not parse")
	_, err = app.Subscribe(st, ignore, amqpactor.WithStreamSQL("n > 1"), amqpactor.WithStreamHeaders(map[string]string{"kind": "order"}))
	require.ErrorContains(e, err, "not both", "SQL and header filters together")
	if !e.f.Features.StreamSQL {
		_, err = app.Subscribe(st, ignore, amqpactor.WithStreamSQL("n > 1"))
		require.ErrorIs(e, err, amqpactor.ErrNotSupported, "an SQL filter where the broker has none")
		require.ErrorContains(e, err, st.String())
	}
	var all, eu, euUS, orders, euOrders, tens, refundsLow, euLate []string
	for i := range 90 {
		id := fmt.Sprintf("f-%d", i)
		m := &amqpactor.Message{MessageID: id, Body: []byte(id), Headers: map[string]any{"n": i}}
		switch i % 3 {
		case 0:
			m.Annotations = map[string]any{amqpactor.StreamFilterAnnotation: "eu"}
			eu, euUS = append(eu, id), append(euUS, id)
			if i >= 45 {
				euLate = append(euLate, id)
			}
		case 1:
			m.Annotations = map[string]any{amqpactor.StreamFilterAnnotation: "us"}
			euUS = append(euUS, id)
		}
		if i%2 == 0 {
			m.Headers["kind"], m.Subject = "order", "orders.new"
			orders = append(orders, id)
			if i%3 == 0 {
				euOrders = append(euOrders, id)
			}
			if i%10 == 0 {
				tens = append(tens, id)
			}
		} else {
			m.Headers["kind"], m.Subject = "refund", "refunds.new"
			if i < 30 {
				refundsLow = append(refundsLow, id)
			}
		}
		all = append(all, id)
		e.publish(app, st, m)
	}
	order := map[string]string{"kind": "order"}
	for _, c := range []struct {
		name   string
		values []string
		heads  map[string]string
		props  map[string]string
		sql    string
		want   []string
	}{
		{name: "eu", values: []string{"eu"}, want: eu}, {name: "eu-us", values: []string{"eu", "us"}, want: euUS},
		{name: "none", want: all},
		{name: "orders", heads: order, want: orders}, {name: "eu-orders", values: []string{"eu"}, heads: order, want: euOrders},
		{name: "subject", props: map[string]string{"subject": "orders.new"}, want: orders},
		{name: "subject-kind", heads: order, props: map[string]string{"subject": "refunds.new"}, want: nil},
		{name: "sql-tens", sql: "kind = 'order' AND n % 5 = 0", want: tens},
		{name: "sql-refunds", sql: "p.subject LIKE 'refund%' AND a.n < 30 AND NOT (n IN (99, 100))", want: refundsLow},
		{name: "sql-eu-late", values: []string{"eu"}, sql: "n >= 45 AND n <= 1000", want: euLate},
	} {
		if (c.heads != nil || c.props != nil) && !e.f.Features.StreamPropertyFilters || c.sql != "" && !e.f.Features.StreamSQL {
			continue
		}
		opts := []amqpactor.SubscribeOption{amqpactor.WithPartitions(1), amqpactor.WithSubscriptionName(c.name),
			amqpactor.WithStreamOffset(amqpactor.StreamFirst()), amqpactor.WithStreamFilterValues(c.values...),
			amqpactor.WithStreamHeaders(c.heads), amqpactor.WithStreamProperties(c.props)}
		if c.sql != "" {
			opts = append(opts, amqpactor.WithStreamSQL(c.sql))
		}
		r := &streamed{}
		e.subscribe(app, st, r.handle, opts...)
		e.eventually(func() bool { return r.count() >= len(c.want) }, "%s: %d messages", c.name, len(c.want))
		time.Sleep(300 * time.Millisecond)
		ids, offs, bad := r.got()
		require.Empty(e, bad, "%s: every delivery carries its offset", c.name)
		require.Equal(e, c.want, ids, "%s: exactly the matching messages, in order", c.name)
		for i := 1; i < len(offs); i++ {
			require.Less(e, offs[i-1], offs[i], "%s: offsets grow", c.name)
		}
	}
}

// streamCut is how testStreamResume interrupts a subscription reading a
// stream.
type streamCut struct {
	name string
	cut  func(e *env, app *amqpactor.App, sys *actor.ActorSystem)
}

// testStreamResume: a subscription reading 10,000 stream messages from the
// first, interrupted in the middle (its subscription actor crashed, and,
// with fault hooks, its connection dropped), loses none and reads again at
// most what was in flight (the credit).
func testStreamResume(e *env) {
	if !e.f.Features.Streams {
		e.Skip("the broker has no streams (Features.Streams): testStreamOffsets asserts the error")
	}
	cuts := []streamCut{{"crash", func(e *env, app *amqpactor.App, sys *actor.ActorSystem) {
		subs := ofKind(e.tree(app), "subscription")
		require.Len(e, subs, 1)
		sys.Root.Send(subs[0].ActorPID(), &testhook.Crash{Reason: "conformance"})
	}}}
	if b, ok := e.hooks(); ok {
		cuts = append(cuts, streamCut{"drop", func(*env, *amqpactor.App, *actor.ActorSystem) {
			b.DropConnections(fmt.Errorf("conformance: connection dropped"))
		}})
	}
	for _, c := range cuts {
		e.Run(c.name, func(t *testing.T) { streamResume(newEnv(t, e.f), c) })
	}
}

func streamResume(e *env, c streamCut) {
	const n, credit = 10000, 64
	st := e.stream("stream")
	sys := actor.NewActorSystem()
	e.Cleanup(sys.Shutdown) // after the App's stop
	app := e.startedApp(amqpactor.WithActorSystem(sys))
	pub := e.startedApp()
	ids := streamIDs("m", n)

	var mu sync.Mutex
	seen := make(map[string]int, n)
	total := 0
	// The handler of the third's message holds its partition until the
	// cut is made, so that the cut comes in the middle, with deliveries
	// in flight.
	held, hold := e.gate(), e.gate()
	h := func(ctx context.Context, m *amqpactor.Message) error {
		mu.Lock()
		seen[fmt.Sprint(m.MessageID)]++
		total++
		third := total == n/3
		mu.Unlock()
		if third {
			held.open()
			hold.wait()
		}
		return nil
	}
	counts := func() (distinct, all int) {
		mu.Lock()
		defer mu.Unlock()
		return len(seen), total
	}
	e.publishIDs(pub, st, ids)
	e.subscribe(app, st, h, amqpactor.WithStreamOffset(amqpactor.StreamFirst()), amqpactor.WithCredit(credit),
		amqpactor.WithSubscriptionName("resume"))
	e.await(held, "a third read")
	c.cut(e, app, sys)
	time.Sleep(50 * time.Millisecond)
	hold.open()
	require.Eventually(e, func() bool { d, _ := counts(); return d == n }, time.Minute, 10*time.Millisecond,
		"every message read after the %s", c.name)
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		require.GreaterOrEqual(e, seen[id], 1, "%s lost", id)
	}
	require.LessOrEqual(e, total-n, credit, "read again: at most what was in flight")
	e.Logf("%s: %d messages, %d read again", c.name, n, total-n)
}
