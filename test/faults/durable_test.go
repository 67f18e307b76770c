package faults

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/test/harness"
)

// Durable, shared topic subscriptions (issue 14): a topic subscription is a
// node named after the App and the subscription, so the replicas of a
// service compete on it and it keeps what is published while they are down.
// Each scenario runs on the in-process broker, on RabbitMQ 4 and on Artemis.

// appMaker returns a new App named name on the test's broker.
type appMaker func(t *testing.T, name string) *amqpactor.App

func inprocMaker(b *inproc.Broker) appMaker {
	return func(t *testing.T, name string) *amqpactor.App {
		log, _ := harness.NewLog(t)
		return amqpactor.New(b, amqpactor.WithName(name), amqpactor.WithLogger(log),
			amqpactor.WithBackoff(backoffInitial, backoffMax))
	}
}

// keep records the name of a subscription for the cleanup of liveBroker.topic.
func keep(subs *[]string, s *amqpactor.Subscription) *amqpactor.Subscription {
	if s != nil {
		*subs = append(*subs, s.Name())
	}
	return s
}

func counting(got *harness.Tally) amqpactor.Handler {
	return func(ctx context.Context, m *amqpactor.Message) error {
		id, _ := m.MessageID.(string)
		got.Add(id)
		return nil
	}
}

// topicFault is one fault of topicFaultScenario: do injects it, back
// reports the subscription attached again after it.
type topicFault struct {
	name string
	do   func()
	back func(app *amqpactor.App, before *amqpactor.Node) bool
}

// receiverBack: the receiver restarted since before and is attached.
func receiverBack(app *amqpactor.App, before *amqpactor.Node) bool {
	r, r0 := harness.OfKind(harness.TreeOr(app), "receiver"), harness.OfKind(before, "receiver")
	return len(r) == 1 && len(r0) == 1 && r[0].State == "attached" && r[0].Restarts > r0[0].Restarts
}

// connectionBack: the connection restarted since before and the receiver
// is attached on it.
func connectionBack(app *amqpactor.App, before *amqpactor.Node) bool {
	n := harness.TreeOr(app)
	if n == nil || before == nil || n.State != "attached" || n.Restarts <= before.Restarts {
		return false
	}
	r := harness.OfKind(n, "receiver")
	return len(r) == 1 && r[0].State == "attached"
}

// topicFaultScenario subscribes app to tp, publishes n uniquely identified
// events through app from 16 goroutines and injects each fault after
// another share of them is confirmed. No event may be lost; duplicates are
// counted (a delivery in flight at a fault comes again) and allowed.
func topicFaultScenario(t *testing.T, app *amqpactor.App, tp amqpactor.Address, n int, budget time.Duration, faults []topicFault) {
	got := harness.NewTally()
	_, err := app.Subscribe(tp, counting(got), amqpactor.WithCredit(256))
	require.NoError(t, err)
	harness.StartApp(t, app)

	ctx := harness.Bound(t, 3*time.Minute)
	all := harness.IDs(harness.Unique("ev"), n)
	started := time.Now()
	pub := harness.PublishAll(ctx, app, tp, all, 16, true)
	var maxResume time.Duration
	for k, f := range faults {
		at := int64((k + 1) * n / (len(faults) + 1))
		require.Eventually(t, func() bool { return pub.Confirmed.Load() >= at }, 90*time.Second, 5*time.Millisecond,
			"%d publishes confirmed before fault %d (confirmed %d, errors %d, last %v)", at, k+1, pub.Confirmed.Load(), pub.Errors.Load(), pub.Err())
		before := harness.Tree(t, app)
		f.do()
		t0 := time.Now()
		require.Eventually(t, func() bool { return f.back(app, before) }, budget, 5*time.Millisecond,
			"attached again after %s (fault %d):\n%s", f.name, k+1, harness.TreeText(harness.TreeOr(app)))
		seen := got.Total()
		require.Eventually(t, func() bool { return got.Total() > seen || got.Distinct() == n }, budget, 5*time.Millisecond,
			"consumption resumes after %s (fault %d):\n%s", f.name, k+1, harness.TreeText(harness.TreeOr(app)))
		maxResume = max(maxResume, time.Since(t0))
	}
	pub.Wait()
	require.EqualValues(t, n, pub.Confirmed.Load(), "every publish returned nil (last error %v)", pub.Err())
	require.Eventually(t, func() bool { return got.Distinct() == n }, 90*time.Second, 10*time.Millisecond,
		"every event delivered: %d of %d; first missing %v\n%s", got.Distinct(), n, harness.First(got.Missing(all), 5), harness.TreeText(harness.TreeOr(app)))
	lost := len(got.Missing(all))
	require.Zero(t, lost)
	t.Logf("FIGURES %s: published=%d lost=%d duplicates=%d faults=%d publish_errors_retried=%d resume_max=%s elapsed=%s",
		t.Name(), n, lost, got.Duplicates(), len(faults), pub.Errors.Load(), maxResume.Round(time.Millisecond),
		time.Since(started).Round(time.Millisecond))
}

// TestInprocTopicDurableFaults: a topic subscription across 3 link
// detaches and 3 dropped connections while 10,000 events flow.
func TestInprocTopicDurableFaults(t *testing.T) {
	b := inproc.New()
	app := inprocMaker(b)(t, harness.Unique("durable"))
	tp := amqpactor.Topic(harness.Unique("durable.events"))
	var faults []topicFault
	for range 3 {
		faults = append(faults,
			topicFault{name: "DetachLinks", back: receiverBack, do: func() {
				require.NotZero(t, b.DetachLinks(tp, "amqp:internal-error", "fault injection: detach"))
			}},
			topicFault{name: "DropConnections", back: connectionBack, do: func() {
				require.NotZero(t, b.DropConnections(errors.New("fault injection: cut")))
			}})
	}
	topicFaultScenario(t, app, tp, 10_000, 15*time.Second, faults)
}

// TestLiveTopicDurableCuts: a topic subscription on a live broker across 3
// connection cuts (the proxy) while 10,000 events flow.
func TestLiveTopicDurableCuts(t *testing.T) {
	eachBroker(t, func(t *testing.T, b liveBroker) {
		p, pu := viaProxy(t, b.url)
		p.Latency(2 * time.Millisecond)
		var subs []string
		name := harness.Unique("faults.durable")
		tp := b.topic(t, "faults.durable.events", &subs)
		// The subscription's name is the App's default: cleaned up by name.
		subs = append(subs, name+"."+tp.Name())
		app := b.maker(pu)(t, name)
		var faults []topicFault
		for range 3 {
			faults = append(faults, topicFault{name: "cut", back: connectionBack, do: func() {
				require.NotZero(t, p.Cut(), "connections cut")
			}})
		}
		topicFaultScenario(t, app, tp, 10_000, 20*time.Second, faults)
	})
}

// keptWhileStopped: events published while every replica of a service is
// stopped are handled by the next one started with the same name.
func keptWhileStopped(t *testing.T, mk appMaker, tp amqpactor.Address, subs *[]string) {
	ctx := harness.Bound(t, time.Minute)
	name := harness.Unique("kept")
	got := harness.NewTally()
	first := mk(t, name)
	keep(subs, must(first.Subscribe(tp, counting(got))))
	harness.StartApp(t, first)
	pub := mk(t, harness.Unique("publisher"))
	harness.StartApp(t, pub)
	require.NoError(t, pub.Publish(ctx, tp, &amqpactor.Message{MessageID: "warm", Durable: true}))
	require.Eventually(t, func() bool { return got.Has("warm") }, 20*time.Second, 5*time.Millisecond)
	harness.StopApp(t, first)

	down := harness.IDs(harness.Unique("down"), 5)
	for _, id := range down {
		require.NoError(t, pub.Publish(ctx, tp, &amqpactor.Message{MessageID: id, Durable: true}))
	}
	next := mk(t, name)
	keep(subs, must(next.Subscribe(tp, counting(got))))
	harness.StartApp(t, next)
	require.Eventually(t, func() bool { return len(got.Missing(down)) == 0 }, 20*time.Second, 5*time.Millisecond,
		"published while stopped, handled after restart: missing %v", got.Missing(down))
	t.Logf("FIGURES %s: published_while_stopped=%d handled_after_restart=%d", t.Name(), len(down), len(down)-len(got.Missing(down)))
}

func must(s *amqpactor.Subscription, err error) *amqpactor.Subscription {
	if err != nil {
		panic(err)
	}
	return s
}

func TestInprocTopicKeptWhileStopped(t *testing.T) {
	var subs []string
	keptWhileStopped(t, inprocMaker(inproc.New()), amqpactor.Topic(harness.Unique("kept.events")), &subs)
}

func TestLiveTopicKeptWhileStopped(t *testing.T) {
	eachBroker(t, func(t *testing.T, b liveBroker) {
		var subs []string
		keptWhileStopped(t, b.maker(b.url), b.topic(t, "faults.kept.events", &subs), &subs)
	})
}

// sharedReplicas: three Apps with one name subscribe to a topic and a
// queue; each message is handled once in total, by one of them, and each
// replica handles some.
func sharedReplicas(t *testing.T, mk appMaker, tp, q amqpactor.Address, subs *[]string) {
	ctx := harness.Bound(t, 2*time.Minute)
	name := harness.Unique("replica")
	const n = 300
	got := map[amqpactor.Address]*harness.Tally{tp: harness.NewTally(), q: harness.NewTally()}
	per := map[amqpactor.Address][]*harness.Tally{}
	var apps []*amqpactor.App
	for range 3 {
		app := mk(t, name)
		for _, a := range []amqpactor.Address{tp, q} {
			mine := harness.NewTally()
			per[a] = append(per[a], mine)
			all := got[a]
			s := must(app.Subscribe(a, func(ctx context.Context, m *amqpactor.Message) error {
				id, _ := m.MessageID.(string)
				all.Add(id)
				mine.Add(id)
				return nil
			}))
			if a == tp && len(apps) == 0 {
				keep(subs, s) // one node shared by the three
			}
		}
		harness.StartApp(t, app)
		apps = append(apps, app)
	}
	for _, a := range []amqpactor.Address{tp, q} {
		want := harness.IDs(harness.Unique(a.Kind().String()), n)
		for i, id := range want {
			require.NoError(t, apps[i%3].Publish(ctx, a, &amqpactor.Message{MessageID: id, Durable: true}))
		}
		require.Eventually(t, func() bool { return got[a].Distinct() == n }, 30*time.Second, 5*time.Millisecond,
			"%s: %d of %d handled", a, got[a].Distinct(), n)
	}
	for _, app := range apps {
		harness.StopApp(t, app)
	}
	for _, a := range []amqpactor.Address{tp, q} {
		require.Zero(t, got[a].Duplicates(), "%s: every message handled once in total", a)
		shares := make([]int, 3)
		for i, mine := range per[a] {
			shares[i] = int(mine.Total())
			require.NotZero(t, shares[i], "%s: replica %d handled nothing: they do not compete", a, i)
		}
		t.Logf("FIGURES %s %s: replicas=3 messages=%d handled=%d duplicates=0 shares=%v", t.Name(), a.Kind(), n, got[a].Total(), shares)
	}
}

func TestInprocTopicSharedReplicas(t *testing.T) {
	var subs []string
	sharedReplicas(t, inprocMaker(inproc.New()), amqpactor.Topic(harness.Unique("shared.events")), amqpactor.Queue(harness.Unique("shared.q")), &subs)
}

func TestLiveTopicSharedReplicas(t *testing.T) {
	eachBroker(t, func(t *testing.T, b liveBroker) {
		var subs []string
		sharedReplicas(t, b.maker(b.url), b.topic(t, "faults.shared.events", &subs), b.queue(t, "faults.shared.q"), &subs)
	})
}

// ephemeralScenario: WithEphemeral gives each instance its own node: two
// replicas with one name both get every event, and what is published while
// an instance is down never reaches it.
func ephemeralScenario(t *testing.T, mk appMaker, tp amqpactor.Address) {
	ctx := harness.Bound(t, time.Minute)
	name := harness.Unique("ephemeral")
	a, b := harness.NewTally(), harness.NewTally()
	r1, r2 := mk(t, name), mk(t, name)
	must(r1.Subscribe(tp, counting(a), amqpactor.WithEphemeral()))
	must(r2.Subscribe(tp, counting(b), amqpactor.WithEphemeral()))
	harness.StartApp(t, r1)
	harness.StartApp(t, r2)
	want := harness.IDs(harness.Unique("e"), 20)
	for _, id := range want {
		require.NoError(t, r1.Publish(ctx, tp, &amqpactor.Message{MessageID: id}))
	}
	require.Eventually(t, func() bool { return a.Distinct() == len(want) && b.Distinct() == len(want) }, 20*time.Second, 5*time.Millisecond,
		"each replica got every event: %d and %d of %d", a.Distinct(), b.Distinct(), len(want))

	harness.StopApp(t, r2)
	publishPastDeparture(ctx, t, r1, tp, &amqpactor.Message{MessageID: "while-down"})
	r3 := mk(t, name)
	c := harness.NewTally()
	must(r3.Subscribe(tp, counting(c), amqpactor.WithEphemeral()))
	harness.StartApp(t, r3)
	require.NoError(t, r1.Publish(ctx, tp, &amqpactor.Message{MessageID: "after"}))
	require.Eventually(t, func() bool { return c.Has("after") }, 20*time.Second, 5*time.Millisecond)
	// The node of r3 is new, and a queue is first in, first out: what it
	// kept would have come before "after".
	require.False(t, c.Has("while-down"), "an ephemeral subscription keeps nothing while it is down")
}

// publishPastDeparture publishes m, again while the broker rejects it with
// precondition-failed: RabbitMQ 4.3 rejects a message routed to a queue it
// is still deleting ("queue ... is unavailable"), here the exclusive node of
// the instance that just stopped. Any other error fails the test.
func publishPastDeparture(ctx context.Context, t *testing.T, app *amqpactor.App, tp amqpactor.Address, m *amqpactor.Message) {
	t.Helper()
	for {
		err := app.Publish(ctx, tp, m)
		var oe *amqpactor.OutcomeError
		if err == nil || !errors.As(err, &oe) || oe.Outcome.Condition != "amqp:precondition-failed" {
			require.NoError(t, err)
			return
		}
		t.Logf("publish rejected while a node goes: %v", err)
		select { // a pause between attempts, bounded by ctx
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestInprocTopicEphemeral(t *testing.T) {
	b := inproc.New()
	tp := amqpactor.Topic(harness.Unique("ephemeral.events"))
	ephemeralScenario(t, inprocMaker(b), tp)
	// Two instances run (the first and the third): the second's node went
	// with its link.
	require.Equal(t, 2, b.Subscriptions(tp.Name()), "an ephemeral subscription node goes with its link")
}

func TestLiveTopicEphemeral(t *testing.T) {
	eachBroker(t, func(t *testing.T, b liveBroker) {
		var subs []string
		ephemeralScenario(t, b.maker(b.url), b.topic(t, "faults.ephemeral.events", &subs))
	})
}

// TestInprocTopicUnnamedApp: an App without WithName has a random name no
// later instance could share, so its topic subscriptions are ephemeral
// unless WithSubscriptionName names them; a named App's are durable.
func TestInprocTopicUnnamedApp(t *testing.T) {
	b := inproc.New()
	tp := amqpactor.Topic(harness.Unique("unnamed.events"))
	log, _ := harness.NewLog(t)
	app := amqpactor.New(b, amqpactor.WithLogger(log))
	must(app.Subscribe(tp, counting(harness.NewTally())))
	must(app.Subscribe(tp, counting(harness.NewTally()), amqpactor.WithSubscriptionName("audit")))
	named := inprocMaker(b)(t, "billing")
	must(named.Subscribe(tp, counting(harness.NewTally())))
	harness.StartApp(t, app)
	harness.StartApp(t, named)
	require.Equal(t, 3, b.Subscriptions(tp.Name()))
	require.True(t, b.HasQueue(tp.Name()+"::audit"), "WithSubscriptionName names a durable node")
	require.True(t, b.HasQueue(tp.Name()+"::billing."+tp.Name()), "a named App's node is named after it")
	harness.StopApp(t, app)
	harness.StopApp(t, named)
	require.Equal(t, 2, b.Subscriptions(tp.Name()), "only the unnamed App's default subscription went with its link")
}
