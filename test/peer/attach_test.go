package peer_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// hangBound is how long a test waits for what should follow at once before
// it calls the run a hang. It is a bound on a failure, never a measurement.
const hangBound = 20 * time.Second

// unanswered is a script whose peer never answers one step of a
// subscription's first attach (the open, its session's begin or its link's
// attach); reached is closed when that step arrives.
func unanswered(step string, reached chan<- struct{}) script {
	var once sync.Once
	arrive := func() { once.Do(func() { close(reached) }) }
	switch step {
	case "open":
		return script{open: func(*peerConn) { arrive() }}
	case "begin":
		return script{begin: func(*peerConn, uint16) { arrive() }}
	default:
		// Nor the detach of the link it never attached, as a broker stuck
		// on the attach would not.
		return script{
			attach: func(c *peerConn, ch uint16, a attach) {
				if !a.receiver {
					c.answerAttach(ch, a)
					return
				}
				arrive()
			},
			detach: func(*peerConn, uint16, []byte) {},
		}
	}
}

// late is a script whose peer answers one step of the first attach after
// delay.
func late(step string, delay time.Duration) script {
	switch step {
	case "open":
		return script{open: func(c *peerConn) { c.later(delay, c.answerOpen) }}
	case "begin":
		return script{begin: func(c *peerConn, ch uint16) { c.later(delay, func() { c.answerBegin(ch) }) }}
	default:
		return script{attach: func(c *peerConn, ch uint16, a attach) { c.later(delay, func() { c.answerAttach(ch, a) }) }}
	}
}

var steps = []string{"open", "begin", "attach"}

// TestStartEndsWithItsContext: Start's context bounds the first attach
// (issue 29, item 6). The peer never answers; Start returns once its
// context is cancelled, with context.Canceled, though the close timeout is
// an hour: nothing of the attach waits for the close timeout.
func TestStartEndsWithItsContext(t *testing.T) {
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			noLeaks(t)
			reached := make(chan struct{})
			b := newBroker(t, unanswered(step, reached))
			app := amqpactor.New(amqpactor.Dial(b.url()), amqpactor.WithCloseTimeout(time.Hour))
			_, err := app.Subscribe(amqpactor.Queue("q"), func(context.Context, *amqpactor.Message) error { return nil })
			require.NoError(t, err)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- app.Start(ctx) }()
			select {
			case <-reached:
			case <-time.After(hangBound):
				t.Fatalf("the peer never got the %s", step)
			}
			cancel()
			select {
			case err = <-errc:
			case <-time.After(hangBound):
				t.Fatalf("Start did not return after its context was cancelled (the peer holds the %s)", step)
			}
			require.ErrorIs(t, err, context.Canceled)
			require.False(t, errors.Is(err, context.DeadlineExceeded), "no other clock ended the Start: %v", err)
		})
	}
}

// TestStartBoundedByItsDeadline: with a close timeout far shorter than
// Start's deadline and a peer that never answers, Start fails with
// context.DeadlineExceeded once its own deadline has passed, not sooner on
// the close timeout's clock (issue 29, item 6: a 30 s Start failed at 5 s).
func TestStartBoundedByItsDeadline(t *testing.T) {
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			noLeaks(t)
			b := newBroker(t, unanswered(step, make(chan struct{})))
			app := amqpactor.New(amqpactor.Dial(b.url()), amqpactor.WithCloseTimeout(50*time.Millisecond))
			_, err := app.Subscribe(amqpactor.Queue("q"), func(context.Context, *amqpactor.Message) error { return nil })
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err = app.Start(ctx)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Error(t, ctx.Err(), "Start failed before its deadline, on another clock: %v", err)
		})
	}
}

// TestStartNotCutShortByCloseTimeout: a step of the first attach answered
// after several close timeouts, well within Start's context, lets Start
// succeed: the close timeout bounds closes, not attaches.
func TestStartNotCutShortByCloseTimeout(t *testing.T) {
	const closeTimeout = 100 * time.Millisecond
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			noLeaks(t)
			b := newBroker(t, late(step, 5*closeTimeout))
			app := amqpactor.New(amqpactor.Dial(b.url()), amqpactor.WithCloseTimeout(closeTimeout))
			_, err := app.Subscribe(amqpactor.Queue("q"), func(context.Context, *amqpactor.Message) error { return nil })
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), hangBound)
			defer cancel()
			require.NoError(t, app.Start(ctx))
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer scancel()
			require.NoError(t, app.Stop(sctx))
		})
	}
}
