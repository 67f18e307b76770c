package conformance

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// testCloseReturnsUnsettled: Subscription.Close with a short context while a
// handler holds a delivery puts it back on its queue; another subscriber gets
// it with first-acquirer false, and the first handler's late disposition is
// dropped: the message is handled exactly once more, not lost, not settled
// twice.
func testCloseReturnsUnsettled(e *env) {
	q := e.queue("close")
	rec := &recorder{}
	holding := e.gate()
	release := e.gate()
	var lateReturned atomic.Bool
	a := e.startedApp()
	subA := e.subscribe(a, q, func(ctx context.Context, m *amqpactor.Message) error {
		rec.add("a", m)
		holding.open()
		// This handler ignores its context, as a slow one would: it
		// returns (accepted) only after the message went elsewhere.
		release.wait()
		lateReturned.Store(true)
		return nil
	})
	e.publish(a, q, msg("held"))
	e.await(holding, "the first subscriber to hold the delivery")
	e.firstAcquirer(rec.of("held")[0].m, true, "the first delivery")

	b := e.startedApp()
	e.subscribe(b, q, func(ctx context.Context, m *amqpactor.Message) error { rec.add("b", m); return nil })

	cctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	err := subA.Close(cctx)
	require.Less(e, time.Since(begin), waitFor/2, "Close did not return by its context")
	if err != nil {
		require.ErrorIs(e, err, context.DeadlineExceeded, "Close")
	}

	e.eventually(func() bool { return rec.by("b") == 1 }, "the held message redelivered to the other subscriber")
	calls := rec.of("held")
	require.Len(e, calls, 2)
	require.Equal(e, "b", calls[1].who)
	require.False(e, calls[1].m.FirstAcquirer, "a redelivered message has first-acquirer false")
	require.Equal(e, "body of held", string(calls[1].m.Body))

	// The first handler now returns: its accept is for a link that is gone.
	release.open()
	e.eventually(lateReturned.Load, "the first handler to return")
	e.publish(b, q, msg("after"))
	e.eventually(func() bool { return rec.count("after") == 1 }, "a message after the close")
	if br, ok := e.hooks(); ok {
		e.eventually(func() bool { return br.Unsettled(q.Name()) == 0 }, "nothing out for delivery")
		require.Zero(e, br.QueueDepth(q.Name()), "nothing left on the queue")
		require.Empty(e, br.DeadLetters(q.Name()), "nothing rejected")
	}
	e.stop(b)
	e.stop(a)
	require.Len(e, rec.of("held"), 2, "the held message is handled exactly once more")
	require.Equal(e, 1, rec.by("a"))
}

// testStopWaitsForHandlers: Stop lets a handler in flight finish, with its
// context alive, and settles its outcome before it detaches: a competing
// subscriber in another App never sees the message.
func testStopWaitsForHandlers(e *env) {
	q := e.queue("graceful")
	rec := &recorder{}
	holding := e.gate()
	release := e.gate()
	var ctxErr atomic.Value
	a := e.startedApp()
	e.subscribe(a, q, func(ctx context.Context, m *amqpactor.Message) error {
		rec.add("a", m)
		holding.open()
		if !release.wait() {
			return errors.New("never released")
		}
		ctxErr.Store(errString(ctx.Err()))
		return nil
	})
	e.publish(a, q, msg("inflight"))
	e.await(holding, "the handler to start")
	// A competitor: it gets the message if Stop hands it back to the broker.
	b := e.startedApp()
	e.subscribe(b, q, func(ctx context.Context, m *amqpactor.Message) error { rec.add("b", m); return nil })

	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(background, waitFor)
		defer cancel()
		stopped <- a.Stop(ctx)
	}()
	require.Never(e, func() bool { return rec.by("b") > 0 }, quiet, tick,
		"the in-flight delivery went back to the broker while its handler ran")
	select {
	case err := <-stopped:
		e.Fatalf("Stop returned (%v) while a handler was in flight", err)
	default:
	}
	release.open()
	select {
	case err := <-stopped:
		require.NoError(e, err, "Stop")
	case <-time.After(waitFor):
		e.Fatalf("Stop did not return after the handler finished")
	}
	require.Equal(e, "<nil>", ctxErr.Load(), "the handler's context ended during a graceful stop")

	// It was accepted: the competitor gets only what comes next.
	e.publish(b, q, msg("next"))
	e.eventually(func() bool { return rec.count("next") == 1 }, "the next message")
	if br, ok := e.hooks(); ok {
		require.Zero(e, br.QueueDepth(q.Name()))
		e.eventually(func() bool { return br.Unsettled(q.Name()) == 0 }, "nothing out for delivery")
	}
	e.stop(b)
	require.Equal(e, 1, rec.count("inflight"), "the message finished during Stop was settled")
}

// testStopByDeadline: Stop returns by its context's deadline even when a
// handler never finishes; the delivery goes back to the broker.
func testStopByDeadline(e *env) {
	q := e.queue("deadline")
	rec := &recorder{}
	holding := e.gate()
	a := e.startedApp()
	e.subscribe(a, q, func(ctx context.Context, m *amqpactor.Message) error {
		rec.add("a", m)
		holding.open()
		e.gate().wait() // stuck until the test ends
		return nil
	})
	e.publish(a, q, msg("stuck"))
	e.await(holding, "the handler to start")

	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(background, deadline)
	defer cancel()
	begin := time.Now()
	_ = a.Stop(ctx) // an error is expected: the drain was cut
	took := time.Since(begin)
	require.Less(e, took, deadline+time.Second, "Stop took %v with a %v deadline", took, deadline)

	// Nothing is lost: the stuck delivery is the broker's again.
	b := e.startedApp()
	e.subscribe(b, q, func(ctx context.Context, m *amqpactor.Message) error { rec.add("b", m); return nil })
	e.eventually(func() bool { return rec.by("b") == 1 }, "the stuck message redelivered")
	calls := rec.of("stuck")
	require.Len(e, calls, 2)
	require.False(e, calls[1].m.FirstAcquirer)
}

// testStopWithoutDeadline: Stop(context.Background()) is bounded by
// WithCloseTimeout even when a handler never returns. When the graceful
// part runs out the handler's context is cancelled, and the delivery it
// holds goes back to the broker released: the next consumer gets it with
// its delivery-count unchanged (not modified, as a failure; not accepted).
func testStopWithoutDeadline(e *env) {
	q := e.queue("nodeadline")
	rec := &recorder{}
	holding, cancelled := e.gate(), e.gate()
	// Four seconds leave the cut (release, detach, end, close) the whole
	// second Stop keeps for it; a one-second timeout left it 250 ms, which
	// a loaded host with the broker beside it can overrun, and a link whose
	// close is abandoned gives its delivery back counted.
	const closeTimeout = 4 * time.Second
	a := e.startedApp(amqpactor.WithCloseTimeout(closeTimeout))
	e.subscribe(a, q, func(ctx context.Context, m *amqpactor.Message) error {
		rec.add("a", m)
		holding.open()
		<-ctx.Done()
		cancelled.open()
		e.gate().wait() // and on, ignoring the cancellation, until the test ends
		return nil
	})
	e.publish(a, q, msg("stuck"))
	e.await(holding, "the handler to start")

	stopped := make(chan error, 1)
	begin := time.Now()
	go func() { stopped <- a.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		e.Logf("Stop(context.Background()) returned after %v with WithCloseTimeout(%v): %v",
			time.Since(begin).Round(time.Millisecond), closeTimeout, err)
	case <-time.After(closeTimeout + 2*time.Second):
		e.Fatalf("Stop(context.Background()) did not return within WithCloseTimeout (%v) and 2 s", closeTimeout)
	}
	require.True(e, cancelled.isOpen(), "the handler's context was cancelled")

	b := e.startedApp()
	e.subscribe(b, q, func(ctx context.Context, m *amqpactor.Message) error { rec.add("b", m); return nil })
	e.eventually(func() bool { return rec.by("b") == 1 }, "the held message redelivered")
	calls := rec.of("stuck")
	require.Len(e, calls, 2)
	if e.f.Features.ReleaseCounts {
		// Released while its consumer was still open, the message may be
		// handed straight back to it and come back once more with the
		// closing channel: each return is counted.
		require.GreaterOrEqual(e, calls[1].m.DeliveryCount, uint32(1), "released: counted (Features.ReleaseCounts)")
	} else {
		require.Zero(e, calls[1].m.DeliveryCount, "released: the delivery-count is unchanged")
	}
	if br, ok := e.hooks(); ok {
		e.eventually(func() bool { return br.Unsettled(q.Name()) == 0 }, "nothing out for delivery")
		require.Empty(e, br.DeadLetters(q.Name()), "nothing rejected")
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// testLifecycleErrors: what an App answers before Start, after a second
// Start and after Stop.
func testLifecycleErrors(e *env) {
	q := e.queue("lifecycle")
	app := e.newApp()
	sub := e.subscribe(app, q, noop)
	require.Error(e, app.Publish(e.ctx, q, msg("x")), "Publish before Start")
	_, err := app.Request(e.ctx, q, msg("x"))
	require.Error(e, err, "Request before Start")
	require.Error(e, app.Transaction(e.ctx, func(*amqpactor.Tx) error { return nil }), "Transaction before Start")
	_, err = app.Tree(e.ctx)
	require.Error(e, err, "Tree before Start")

	e.start(app)
	require.Error(e, app.Start(e.ctx), "a second Start")
	e.stop(app)
	require.NoError(e, app.Stop(e.ctx), "a second Stop")
	require.ErrorIs(e, app.Publish(e.ctx, q, msg("x")), amqpactor.ErrStopped, "Publish after Stop")
	_, err = app.Request(e.ctx, q, msg("x"))
	require.ErrorIs(e, err, amqpactor.ErrStopped, "Request after Stop")
	_, err = app.Subscribe(q, noop)
	require.ErrorIs(e, err, amqpactor.ErrStopped, "Subscribe after Stop")
	require.ErrorIs(e, app.Transaction(e.ctx, func(*amqpactor.Tx) error { return nil }), amqpactor.ErrStopped, "Transaction after Stop")
	ctx, cancel := context.WithTimeout(e.ctx, waitFor)
	defer cancel()
	require.NoError(e, sub.Close(ctx), "Close after Stop")

	never := e.newApp()
	require.NoError(e, never.Stop(e.ctx), "Stop before Start")
	require.Error(e, never.Start(e.ctx), "Start after Stop")
}
