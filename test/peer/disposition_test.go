package peer_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
)

// noLeaks checks, once the test and its peer are done, that every goroutine
// the test started has ended.
func noLeaks(t *testing.T) {
	t.Cleanup(func() {
		goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	})
}

// TestDispositionRange: the peer's first connection answers a publish with a
// disposition of the whole delivery-id space, which go-amqp's session would
// walk for ever (issue 29, item 2). The connection is closed with
// amqp:connection:framing-error instead, the publish ends before its
// context, the runtime reconnects and publishes go through, Stop keeps its
// bound and no goroutine is left spinning.
func TestDispositionRange(t *testing.T) {
	noLeaks(t)
	b := newBroker(t, script{transfer: func(c *peerConn, ch uint16, id uint32) {
		if c.n == 1 {
			c.settle(ch, 0, math.MaxUint32)
			return
		}
		c.settle(ch, id, id)
	}})
	app := amqpactor.New(amqpactor.Dial(b.url()), amqpactor.WithBackoff(10*time.Millisecond, 100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))

	pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
	err := app.Publish(pctx, amqpactor.Queue("q"), &amqpactor.Message{Body: []byte("first")})
	require.NoError(t, pctx.Err(), "the publish waited out its context (err %v)", err)
	pcancel()

	select {
	case cs := <-b.closes:
		require.Equal(t, int64(1), cs.conn, "the first connection is the one closed")
		require.Contains(t, string(cs.body), "amqp:connection:framing-error")
		require.Contains(t, string(cs.body), "delivery-ids 0..4294967295")
	case <-ctx.Done():
		t.Fatal("the connection that sent the range was never closed")
	}

	require.Eventually(t, func() bool {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		defer pcancel()
		return app.Publish(pctx, amqpactor.Queue("q"), &amqpactor.Message{Body: []byte("after")}) == nil
	}, 20*time.Second, 10*time.Millisecond, "publishes go through after the reconnect")
	require.GreaterOrEqual(t, b.accepted.Load(), int64(2), "the runtime reconnected")

	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	stopAt := time.Now()
	require.NoError(t, app.Stop(sctx))
	require.NoError(t, sctx.Err(), "Stop kept its bound")
	t.Logf("FIGURES first publish %v; connections %d; Stop %v", err, b.accepted.Load(), time.Since(stopAt).Round(time.Millisecond))
}

// TestFlowForUnattachedHandle: a flow for a handle the peer never attached
// is go-amqp's to refuse, not the guard's: go-amqp ends that session with
// amqp:session:unattached-handle, and the runtime takes it as any lost
// session and attaches the subscription again on a new one.
func TestFlowForUnattachedHandle(t *testing.T) {
	noLeaks(t)
	type at struct {
		c  *peerConn
		ch uint16
	}
	attached := make(chan at, 16)
	ended := make(chan []byte, 16)
	b := newBroker(t, script{
		attach: func(c *peerConn, ch uint16, a attach) {
			c.answerAttach(ch, a)
			if a.receiver {
				attached <- at{c, ch}
			}
		},
		end: func(_ *peerConn, _ uint16, body []byte) { ended <- body },
	})
	app := amqpactor.New(amqpactor.Dial(b.url()), amqpactor.WithBackoff(10*time.Millisecond, 100*time.Millisecond))
	_, err := app.Subscribe(amqpactor.Queue("q"), func(context.Context, *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))

	var first at
	select {
	case first = <-attached:
	case <-ctx.Done():
		t.Fatal("the subscription never attached")
	}
	first.c.write(frame(0, first.ch, performative(0x13, encUint(0), encUint(5000), encUint(0), encUint(5000),
		encUint(77), encUint(0), encUint(10))))
	select {
	case body := <-ended:
		require.Contains(t, string(body), "amqp:session:unattached-handle")
	case <-ctx.Done():
		t.Fatal("the session with the flow for handle 77 never ended")
	}
	select {
	case again := <-attached:
		require.Equal(t, first.c, again.c, "on the same connection")
	case <-ctx.Done():
		t.Fatal("the subscription never attached again")
	}
	require.Equal(t, int64(1), b.accepted.Load(), "the connection stayed up")

	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	require.NoError(t, app.Stop(sctx))
}

// TestStopForgivesAnEndForAStrayFlow: RabbitMQ 4.3 ends a session with
// amqp:session:unattached-handle when a flow for a link already detached
// reaches it (go-amqp can send one after the detach, go-amqp issue 367).
// In a graceful stop every link of the session has been drained and
// detached by then, so the session the stop ends is ended either way:
// Stop returns nil, as it does for a plain end.
func TestStopForgivesAnEndForAStrayFlow(t *testing.T) {
	noLeaks(t)
	cond := "amqp:session:unattached-handle"
	refusal := performative(0x1d, append([]byte{0xa3, byte(len(cond))}, cond...), encStr("Unattached link handle: 0"))
	b := newBroker(t, script{
		detach: func(c *peerConn, ch uint16, h []byte) {
			c.answerDetach(ch, h)
			c.endWith(ch, refusal)
		},
	})
	app := amqpactor.New(amqpactor.Dial(b.url()))
	_, err := app.Subscribe(amqpactor.Queue("q"), func(context.Context, *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	require.NoError(t, app.Stop(ctx))
}
