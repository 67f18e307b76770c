package actors

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor/internal/protocol"
)

func TestBackoffBounds(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	for n := 1; n <= 12; n++ {
		want := min(100*time.Millisecond<<(n-1), time.Second)
		for range 50 {
			d := b.Delay(n)
			require.GreaterOrEqual(t, d, want/2, "attempt %d", n)
			require.LessOrEqual(t, d, want, "attempt %d", n)
		}
	}
	require.LessOrEqual(t, Backoff{}.Delay(1<<20), 30*time.Second, "the zero value caps at 30 s")
}

func TestPoolRunsEverythingAndLeavesNothing(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := NewPool(4)
	var ran atomic.Int64
	done := make(chan struct{})
	const n = 1000
	for range n {
		p.Schedule(func() {
			if ran.Add(1) == n {
				close(done)
			}
		})
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("ran %d of %d", ran.Load(), n)
	}
	p.Close()
	// After Close, work still runs, on goroutines of its own.
	again := make(chan struct{})
	p.Schedule(func() { close(again) })
	<-again
}

func TestEnvWaitsForItsGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t)
	var e Env
	release := make(chan struct{})
	e.Go(func() { <-release })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, e.Wait(ctx), context.DeadlineExceeded, "Wait honours its context")
	close(release)
	require.NoError(t, e.Wait(context.Background()))
}

func TestSetStateReportsChangesOnly(t *testing.T) {
	var got []protocol.StateChange
	env := &Env{OnState: func(sc protocol.StateChange) { got = append(got, sc) }}
	n := SubscriptionNode("s", "queue:q").Child("receiver", "receiver", "queue:q")
	var state string
	env.SetState(&state, n, protocol.StateAttaching, nil)
	env.SetState(&state, n, protocol.StateAttaching, nil) // no change: no report
	cause := errors.New("link detached")
	env.SetState(&state, n, protocol.StateRestarting, cause)
	if state != protocol.StateRestarting || len(got) != 2 {
		t.Fatalf("state %q, %d changes: %+v", state, len(got), got)
	}
	want := []string{"→attaching", "attaching→restarting"}
	for i, sc := range got {
		if sc.From+"→"+sc.To != want[i] || sc.Path != "connection/subscription:s/receiver" || sc.Kind != "receiver" || sc.At.IsZero() {
			t.Fatalf("change %d: %+v", i, sc)
		}
	}
	if got[1].Err != cause {
		t.Fatalf("err %v", got[1].Err)
	}
	// Without OnState (or an Env) the state still changes.
	var e *Env
	e.SetState(&state, n, protocol.StateStopped, nil)
	if state != protocol.StateStopped {
		t.Fatal(state)
	}
}

// TestAttachCtx: an attach is bounded by its caller's context and its own
// bound, whichever ends first, and never by the close timeout.
func TestAttachCtx(t *testing.T) {
	env := &Env{CloseTimeout: time.Millisecond, AttachTimeout: time.Hour}
	ctx, cancel := env.AttachCtx(nil)
	dl, ok := ctx.Deadline()
	require.True(t, ok, "an attach is always bounded")
	require.Greater(t, time.Until(dl), time.Minute, "by its own bound, not the close timeout")
	cancel()

	caller, stop := context.WithCancel(context.Background())
	ctx, cancel = env.AttachCtx(caller)
	defer cancel()
	stop()
	<-ctx.Done()
	require.ErrorIs(t, ctx.Err(), context.Canceled, "the caller's end ends it")

	short, cancelShort := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelShort()
	ctx, cancel = (&Env{}).AttachCtx(short)
	defer cancel()
	got, _ := ctx.Deadline()
	want, _ := short.Deadline()
	require.Equal(t, want, got, "the caller's deadline when it is the earlier")
	ctx, cancel = (&Env{}).AttachCtx(nil)
	defer cancel()
	got, _ = ctx.Deadline()
	require.WithinDuration(t, time.Now().Add(DefaultAttachTimeout), got, time.Minute, "DefaultAttachTimeout without one")
}

// An attach that fails because the broker ended the connection (with a
// condition, as a broker shutting down does) is no refusal of the attach:
// the sender must wait for the next connection, not fail what waits on it.
// A session ended with a condition is how RabbitMQ 4 refuses an attach.
func TestRefusedIsTheCallsOwnAnswer(t *testing.T) {
	forced := &amqp.Error{Condition: amqp.ErrCondConnectionForced, Description: "shutting down"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"attach refused", &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondNotFound}}, true},
		{"broker's error", fmt.Errorf("declare: %w", &amqp.Error{Condition: amqp.ErrCondPreconditionFailed}), true},
		{"connection ended with a condition", fmt.Errorf("attach queue:orders: %w", &amqp.ConnError{RemoteErr: forced}), false},
		{"session ended with the attach's refusal", &amqp.SessionError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondNotFound}}, true},
		{"timeout", context.DeadlineExceeded, false},
	} {
		if got := Refused(tc.err); got != tc.want {
			t.Errorf("%s: Refused = %v, want %v", tc.name, got, tc.want)
		}
	}
}
