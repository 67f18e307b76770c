package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// routed lists the subjects the binding-key tests publish with, and which
// of the patterns "orders.*.eu", "orders.#" and "#.us" each one matches,
// written out by hand rather than computed by the matcher under test.
var routed = []struct {
	subject        string
	eu, orders, us bool
}{
	{"orders.new.eu", true, true, false},
	{"orders.paid.eu", true, true, false},
	{"orders.new.us", false, true, true},
	{"orders.us", false, true, true},
	{"orders.eu", false, true, false},
	{"orders.new.big.eu", false, true, false},
	{"orders", false, true, false},
	{"payments.us", false, false, true},
	{"us", false, false, true},
	{"payments.eu", false, false, false},
	{"ordersx.new.eu", false, false, false},
	{"", false, false, false},
}

// keyed records, per subscription, the message-ids it handled.
type keyed struct {
	mu  sync.Mutex
	got map[string][]string
}

func (k *keyed) handler(who string) amqpactor.Handler {
	return func(ctx context.Context, m *amqpactor.Message) error {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.got == nil {
			k.got = map[string][]string{}
		}
		k.got[who] = append(k.got[who], fmt.Sprint(m.MessageID))
		return nil
	}
}

func (k *keyed) of(who string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := slices.Clone(k.got[who])
	slices.Sort(out)
	return out
}

func (k *keyed) has(who, id string) bool { return slices.Contains(k.of(who), id) }

// testBindingKeys: three subscriptions bound with "orders.*.eu" (shared by
// two replicas), "orders.#" and "#.us" (ephemeral) and one bound with none
// get exactly their share of 1,000 messages published with mixed subjects,
// each message once; a
// subscription given "#" among other keys gets everything. Without
// Features.BindingKeys, Subscribe fails naming the address and the
// broker's limit, before anything reaches the wire.
func testBindingKeys(e *env) {
	tp := e.topic("keys")
	app := e.startedApp()
	rec := &keyed{}
	if !e.f.Features.BindingKeys {
		_, err := app.Subscribe(tp, rec.handler("eu"), amqpactor.WithBindingKeys("orders.*.eu"))
		require.Error(e, err, "binding keys on a broker that cannot bind by pattern")
		require.Contains(e, err.Error(), tp.String(), "the error names the address")
		// "#" is what every topic subscription there gets anyway.
		e.subscribe(app, tp, rec.handler("all"), amqpactor.WithBindingKeys("#"))
		return
	}
	eu := e.unique("keys-eu")
	e.subscribe(app, tp, rec.handler("eu"), amqpactor.WithBindingKeys("orders.*.eu"), amqpactor.WithSubscriptionName(eu))
	replica := app
	if !e.f.Features.AMQP091 {
		// A second replica shares the durable subscription, keys and all
		// (over 0-9-1 a topic subscription's queue is its connection's own).
		replica = e.startedApp()
		e.subscribe(replica, tp, rec.handler("eu"), amqpactor.WithBindingKeys("orders.*.eu"), amqpactor.WithSubscriptionName(eu))
	}
	e.subscribe(app, tp, rec.handler("orders"), amqpactor.WithBindingKeys("orders.#"))
	e.subscribe(app, tp, rec.handler("us"), amqpactor.WithBindingKeys("#.us"), amqpactor.WithEphemeral())
	e.subscribe(app, tp, rec.handler("every"))
	e.subscribe(app, tp, rec.handler("hash"), amqpactor.WithBindingKeys("orders.*.eu", "#"))

	const n = 1000
	want := map[string][]string{}
	for i := range n {
		r := routed[i%len(routed)]
		id := fmt.Sprintf("k-%04d", i)
		m := msg(id)
		m.Subject = r.subject
		e.publish(app, tp, m)
		for who, match := range map[string]bool{"eu": r.eu, "orders": r.orders, "us": r.us, "every": true, "hash": true} {
			if match {
				want[who] = append(want[who], id)
			}
		}
	}
	// Markers after the lot: a subscription that has its marker has had
	// everything published before it offered (a queue keeps order), so
	// what it holds once the App stops is all it will ever get.
	markers := map[string]string{"eu": "orders.end.eu", "orders": "orders.end", "us": "end.us", "every": "end", "hash": "end"}
	for who, subject := range markers {
		m := msg("end-" + who)
		m.Subject = subject
		e.publish(app, tp, m)
	}
	missing := func() []string {
		var out []string
		for who := range markers {
			if !rec.has(who, "end-"+who) {
				out = append(out, fmt.Sprintf("%s (%d handled)", who, len(rec.of(who))))
			}
		}
		return out
	}
	if !waitUntil(func() bool { return len(missing()) == 0 }) {
		e.Fatalf("markers never arrived at %v", missing())
	}
	e.stop(app)
	if replica != app {
		e.stop(replica)
	}
	for who, ids := range want {
		got := slices.DeleteFunc(rec.of(who), func(id string) bool { return strings.HasPrefix(id, "end-") })
		require.Equal(e, len(ids), len(got), "messages handled by the subscription %s", who)
		require.Equal(e, ids, got, "the subscription %s got other messages than its keys match", who)
	}
	require.Equal(e, 1000, len(want["every"]))
}

// testBindingKeysRebind: a durable subscription attached again with other
// keys is bound with exactly the new ones: nothing its old keys matched
// arrives any more, whether the new keys share one with the old or not,
// and going back to no keys takes every message again. A publish that a
// subscription's keys do not match is still accepted when another takes it.
func testBindingKeysRebind(e *env) {
	if !e.f.Features.BindingKeys {
		e.Skip("the broker cannot bind by pattern (Features.BindingKeys): testBindingKeys asserts the error")
	}
	tp := e.topic("rebind")
	name := e.unique("rebind-sub")
	steps := []struct {
		keys []string
		// subjects to publish, and whether each must arrive
		subjects map[string]bool
	}{
		{nil, map[string]bool{"a.b": true, "": true}},
		{[]string{"orders.*.eu"}, map[string]bool{"orders.x.eu": true, "a.b": false, "": false}},
		{[]string{"orders.*.eu", "#.us"}, map[string]bool{"orders.x.eu": true, "x.us": true, "payments.eu": false}},
		{[]string{"payments.*"}, map[string]bool{"payments.eu": true, "orders.x.eu": false, "x.us": false}},
		{nil, map[string]bool{"payments.eu": true, "orders.x.eu": true, "x.us": true, "": true}},
	}
	for i, st := range steps {
		rec := &keyed{}
		app := e.startedApp()
		opts := []amqpactor.SubscribeOption{amqpactor.WithSubscriptionName(name)}
		if st.keys != nil {
			opts = append(opts, amqpactor.WithBindingKeys(st.keys...))
		}
		e.subscribe(app, tp, rec.handler("h"), opts...)
		// A broker answers released to a publish that no binding takes
		// (RabbitMQ); this one takes them all.
		e.subscribe(app, tp, rec.handler("all"), amqpactor.WithEphemeral())
		var wantIDs []string
		for subject, arrives := range st.subjects {
			id := fmt.Sprintf("s%d-%q", i, subject)
			m := msg(id)
			m.Subject = subject
			e.publish(app, tp, m)
			if arrives {
				wantIDs = append(wantIDs, id)
			}
		}
		marker := fmt.Sprintf("s%d-marker", i)
		m := msg(marker)
		for s, arrives := range st.subjects {
			if arrives {
				m.Subject = s
				break
			}
		}
		e.publish(app, tp, m)
		e.eventually(func() bool { return rec.has("h", marker) }, "step %d (keys %q): the marker", i, st.keys)
		e.stop(app)
		got := slices.DeleteFunc(rec.of("h"), func(id string) bool { return id == marker })
		slices.Sort(wantIDs)
		require.Equal(e, wantIDs, got, "step %d: keys %q", i, st.keys)
	}
}

// waitUntil polls cond until it holds or waitFor has passed.
func waitUntil(cond func() bool) bool {
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(tick)
	}
	return true
}
