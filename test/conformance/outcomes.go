package conformance

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// testDeliveryCountModified: a handler error sends modified{delivery-failed};
// the message comes back with delivery-count + 1 and first-acquirer false.
func testDeliveryCountModified(e *env) {
	if !e.f.Features.DeliveryCountOnModified {
		e.Skipf("%s does not count modified in delivery-count (Features.DeliveryCountOnModified)", e.f.Name)
	}
	q := e.queue("modified")
	rec := &recorder{}
	app := e.startedApp()
	sub := e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		if rec.add("h", m); len(rec.of(m.MessageID)) < 3 {
			return errors.New("transient failure")
		}
		return nil
	})
	e.publish(app, q, msg("x"))
	e.eventually(func() bool {
		return countersAre(app, sub, map[string]uint64{"modified": 2, "accepted": 1})
	}, "two failures and a success")
	calls := rec.of("x")
	require.Len(e, calls, 3, "attempts")
	for i, c := range calls {
		require.EqualValues(e, i, c.m.DeliveryCount, "delivery-count of attempt %d", i+1)
		e.firstAcquirer(c.m, i == 0, "attempt %d", i+1)
		require.Equal(e, "body of x", string(c.m.Body), "body of attempt %d", i+1)
	}
}

// testDeliveryCountReleased: Release() sends released; the message comes
// back with its delivery-count unchanged.
func testDeliveryCountReleased(e *env) {
	q := e.queue("released")
	rec := &recorder{}
	app := e.startedApp()
	sub := e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		if rec.add("h", m); len(rec.of(m.MessageID)) < 3 {
			return amqpactor.Release()
		}
		return nil
	})
	e.publish(app, q, msg("x"))
	e.eventually(func() bool {
		return countersAre(app, sub, map[string]uint64{"released": 2, "accepted": 1, "modified": 0})
	}, "two releases and a success")
	calls := rec.of("x")
	require.Len(e, calls, 3, "attempts")
	for i, c := range calls {
		if e.f.Features.ReleaseCounts {
			require.EqualValues(e, i, c.m.DeliveryCount, "delivery-count of attempt %d after released (Features.ReleaseCounts)", i+1)
			continue
		}
		require.Zero(e, c.m.DeliveryCount, "delivery-count of attempt %d after released", i+1)
	}
}

// testMaxDeliveries: with RetryPolicy{MaxDeliveries: 3} a message that
// always fails is tried exactly 3 times and then rejected, while the other
// messages keep flowing.
func testMaxDeliveries(e *env) {
	if !e.f.Features.DeliveryCountOnModified {
		e.Skipf("%s does not count modified in delivery-count, which MaxDeliveries reads (Features.DeliveryCountOnModified)", e.f.Name)
	}
	q := e.queue("maxdeliveries")
	rec := &recorder{}
	app := e.startedApp()
	sub := e.subscribe(app, q, rec.failing("poison"), amqpactor.WithRetry(amqpactor.RetryPolicy{MaxDeliveries: 3}), amqpactor.WithPartitions(4))

	e.publish(app, q, msg("poison"))
	good := ids("good", 30)
	e.publishIDs(app, q, good)
	e.eventually(func() bool {
		return countersAre(app, sub, map[string]uint64{"rejected": 1, "accepted": uint64(len(good))})
	}, "the poison message rejected and the others accepted")
	c := counters(app, sub)
	require.EqualValues(e, 2, c["modified"], "failures before the last attempt are modified: %v", c)
	calls := rec.of("poison")
	require.Len(e, calls, 3, "attempts of the poison message")
	for i, call := range calls {
		require.EqualValues(e, i, call.m.DeliveryCount, "delivery-count of attempt %d", i+1)
	}
	e.onceEach(rec, good)
	if b, ok := e.hooks(); ok {
		e.eventually(func() bool { return len(b.DeadLetters(q.Name())) == 1 }, "the poison message dead-lettered")
		dl := b.DeadLetters(q.Name())[0]
		require.Equal(e, amqpactor.CondMaxDeliveries, dl.Annotations["x-opt-inproc-condition"])
		require.Contains(e, dl.Annotations["x-opt-inproc-description"], "always fails")
		require.Zero(e, b.QueueDepth(q.Name()), "nothing left on the queue")
	}
	// Nothing more comes: a stop settles what is in flight.
	e.stop(app)
	require.Len(e, rec.of("poison"), 3, "attempts of the poison message after stop")
}

// testRetryAddress: with RetryPolicy{RetryAddress} (for brokers that ignore
// modified) a failure publishes a copy with delivery-count + 1 to the retry
// address and accepts the original; with the retry address being the queue
// itself and MaxDeliveries 3, a message that always fails is tried 3 times
// and then rejected, without a single modified outcome.
func testRetryAddress(e *env) {
	q := e.queue("retryaddr")
	rec := &recorder{}
	app := e.startedApp()
	sub := e.subscribe(app, q, rec.failing("poison"), amqpactor.WithRetry(amqpactor.RetryPolicy{MaxDeliveries: 3, RetryAddress: q}))
	e.publish(app, q, &amqpactor.Message{MessageID: "poison", Body: []byte("p"), Headers: map[string]any{"k": "v"}})
	good := ids("good", 10)
	e.publishIDs(app, q, good)
	e.eventually(func() bool {
		return countersAre(app, sub, map[string]uint64{"rejected": 1, "accepted": uint64(len(good) + 2)})
	}, "two copies republished (originals accepted), then the poison message rejected")
	c := counters(app, sub)
	require.Zero(e, c["modified"], "a retry address replaces modified: %v", c)
	calls := rec.of("poison")
	require.Len(e, calls, 3, "attempts of the poison message")
	for i, call := range calls {
		require.EqualValues(e, i, call.m.DeliveryCount, "delivery-count of attempt %d (the copy carries it)", i+1)
		require.Equal(e, "p", string(call.m.Body), "the copy's body")
		require.Equal(e, "v", call.m.Headers["k"], "the copy's headers")
	}
	e.onceEach(rec, good)
	if b, ok := e.hooks(); ok {
		e.eventually(func() bool { return len(b.DeadLetters(q.Name())) == 1 }, "the poison message dead-lettered")
		require.Zero(e, b.QueueDepth(q.Name()))
	}
}

// testReject: Reject(err) settles rejected with the error's text (and an
// *amqp.Error's condition); the message is not redelivered.
func testReject(e *env) {
	q := e.queue("reject")
	rec := &recorder{}
	app := e.startedApp()
	sub := e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		rec.add("h", m)
		switch m.MessageID {
		case "plain":
			return amqpactor.Reject(errors.New("bad order"))
		case "cond":
			return amqpactor.Reject(&amqp.Error{Condition: "app:invalid-order", Description: "no lines"})
		}
		return nil
	}, amqpactor.WithPartitions(1))
	e.publish(app, q, msg("plain"))
	e.publish(app, q, msg("cond"))
	e.publish(app, q, msg("ok"))
	e.eventually(func() bool {
		return countersAre(app, sub, map[string]uint64{"rejected": 2, "accepted": 1})
	}, "two rejected, one accepted")
	e.stop(app)
	require.Equal(e, 1, rec.count("plain"), "a rejected message is not redelivered")
	require.Equal(e, 1, rec.count("cond"), "a rejected message is not redelivered")
	require.Equal(e, 3, rec.n())
	if b, ok := e.hooks(); ok {
		dead := b.DeadLetters(q.Name())
		require.Len(e, dead, 2)
		byID := map[any]*amqp.Message{}
		for _, d := range dead {
			byID[d.Properties.MessageID] = d
		}
		require.Equal(e, amqpactor.CondRejected, byID["plain"].Annotations["x-opt-inproc-condition"])
		require.Equal(e, "bad order", byID["plain"].Annotations["x-opt-inproc-description"])
		require.Equal(e, "app:invalid-order", byID["cond"].Annotations["x-opt-inproc-condition"])
		require.Equal(e, "no lines", byID["cond"].Annotations["x-opt-inproc-description"])
	}
}

// testUndeliverable: Undeliverable(err) settles
// modified{delivery-failed, undeliverable-here}: the same receiver never gets
// the message again; on brokers that keep it, another receiver does.
func testUndeliverable(e *env) {
	q := e.queue("undeliverable")
	rec := &recorder{}
	a := e.startedApp()
	subA := e.subscribe(a, q, func(ctx context.Context, m *amqpactor.Message) error {
		rec.add("a", m)
		if m.MessageID == "u" {
			return amqpactor.Undeliverable(errors.New("not for this service"))
		}
		return nil
	}, amqpactor.WithPartitions(1))
	e.publish(a, q, msg("u"))
	e.eventually(func() bool { return countersAre(a, subA, map[string]uint64{"modified": 1}) }, "modified sent")

	if e.f.Features.UndeliverableHereKeeps {
		b := e.startedApp()
		e.subscribe(b, q, func(ctx context.Context, m *amqpactor.Message) error { rec.add("b", m); return nil })
		e.eventually(func() bool { return rec.by("b") == 1 }, "another receiver gets the message")
		calls := rec.of("u")
		require.Len(e, calls, 2)
		require.Equal(e, "a", calls[0].who)
		require.Equal(e, "b", calls[1].who, "the message went back to the receiver that said undeliverable-here")
		require.False(e, calls[1].m.FirstAcquirer)
		if e.f.Features.DeliveryCountOnModified {
			require.EqualValues(e, 1, calls[1].m.DeliveryCount, "undeliverable-here is also delivery-failed")
		}
	}
	// The receiver that refused it never gets it again: a message published
	// after it is handled, and it is not.
	e.publish(a, q, msg("after"))
	e.eventually(func() bool { return rec.count("after") == 1 }, "the next message")
	e.stop(a)
	refused := 0
	for _, c := range rec.of("u") {
		if c.who == "a" {
			refused++
		}
	}
	require.Equal(e, 1, refused, "calls of the refusing receiver for the refused message")
}

// testPanicRecovered: a panicking handler fails its delivery (modified, so
// it is retried) and its worker goes on with the next messages.
func testPanicRecovered(e *env) {
	q := e.queue("panic")
	rec := &recorder{}
	app := e.startedApp()
	// One partition: the worker that ran the panic must run the rest too.
	sub := e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		if rec.add("h", m); m.MessageID == "boom" && len(rec.of("boom")) == 1 {
			panic("handler bug")
		}
		return nil
	}, amqpactor.WithPartitions(1))
	e.publish(app, q, msg("boom"))
	good := ids("good", 20)
	e.publishIDs(app, q, good)
	e.eventually(func() bool {
		return countersAre(app, sub, map[string]uint64{"modified": 1, "accepted": uint64(len(good) + 1)})
	}, "the panic failed one delivery, everything else was accepted")
	calls := rec.of("boom")
	require.Len(e, calls, 2, "the panicked message is retried once")
	require.False(e, calls[1].m.FirstAcquirer)
	if e.f.Features.DeliveryCountOnModified {
		require.EqualValues(e, 1, calls[1].m.DeliveryCount)
	}
	e.onceEach(rec, good)
	require.EqualValues(e, 1, e.failedInPartitions(app), "partition failures")
}

// testAtMostOnce: an AtMostOnce subscription gets settled deliveries: a
// failure is not redelivered, and the broker holds nothing for the handler.
func testAtMostOnce(e *env) {
	q := e.queue("atmostonce")
	rec := &recorder{}
	held := e.gate()
	release := e.gate()
	var calls atomic.Int32
	app := e.startedApp()
	e.subscribe(app, q, func(ctx context.Context, m *amqpactor.Message) error {
		rec.add("h", m)
		calls.Add(1)
		switch m.MessageID {
		case "hold":
			held.open()
			if !release.wait() {
				e.Errorf("the test never released the handler")
			}
		case "fail":
			return errors.New("lost on purpose")
		}
		return nil
	}, amqpactor.AtMostOnce(), amqpactor.WithPartitions(1))
	e.publish(app, q, msg("hold"))
	e.await(held, "the handler to hold a delivery")
	if b, ok := e.hooks(); ok {
		require.Zero(e, b.Unsettled(q.Name()), "an at-most-once delivery is settled by the broker on transfer")
	}
	release.open()
	e.publish(app, q, msg("fail"))
	e.publish(app, q, msg("after"))
	e.eventually(func() bool { return rec.count("after") == 1 }, "the message after the failure")
	e.stop(app)
	require.Equal(e, 1, rec.count("fail"), "an at-most-once failure is not redelivered")
	require.EqualValues(e, 3, calls.Load())
	if b, ok := e.hooks(); ok {
		require.Zero(e, b.QueueDepth(q.Name()))
		require.Zero(e, b.Unsettled(q.Name()))
	}
}
