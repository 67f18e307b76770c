package amqpactor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/test/harness"
	"github.com/amqpactor/amqpactor/transport"
)

// protoactor's dead-letter log throttle ends by itself a second after the
// first dead letter of an actor system.
var ignoreThrottle = goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1")

// sharedSystem is one actor system for the many Apps of a race test (an
// actor system of its own takes an App milliseconds to make); each App gets
// a name of its own in it.
func sharedSystem(t *testing.T) *actor.ActorSystem {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	t.Cleanup(sys.Shutdown)
	return sys
}

// runs is how many times a race is run: 1,000, or 100 under -short.
func runs() int {
	if testing.Short() {
		return 100
	}
	return 1000
}

// guarded runs f, turning a panic into a count and a recorded value.
type panics struct {
	n     atomic.Int64
	mu    sync.Mutex
	first any
}

func (p *panics) run(f func()) {
	defer func() {
		if v := recover(); v != nil {
			p.n.Add(1)
			p.mu.Lock()
			if p.first == nil {
				p.first = fmt.Sprintf("%v", v)
			}
			p.mu.Unlock()
		}
	}()
	f()
}

// parallel runs each f in its own goroutine, all released at once, and
// waits for them.
func parallel(p *panics, fs ...func()) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, f := range fs {
		wg.Go(func() {
			<-start
			p.run(f)
		})
	}
	close(start)
	wg.Wait()
}

// stallingConnector dials the in-process broker only after the dial's
// context has ended: a connect that completes after Start gave up on it.
// entered is closed when the first dial begins.
type stallingConnector struct {
	*inproc.Broker
	once    sync.Once
	entered chan struct{}
}

func (c *stallingConnector) Connect(ctx context.Context) (transport.Conn, error) {
	c.once.Do(func() { close(c.entered) })
	<-ctx.Done()
	return c.Broker.Connect(context.Background())
}

// TestStartStopRaces: Start and Stop in every order and at once never panic
// and never leave a connection open; a Stop that wins makes Start fail with
// ErrStopped; a Start after Stop is ErrStopped.
func TestStartStopRaces(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	var p panics
	var startOK, startStopped, conns atomic.Int64
	n := runs()
	for i := range n {
		b := inproc.New()
		var c amqpactor.Connector = b
		stalling := &stallingConnector{Broker: b, entered: make(chan struct{})}
		if i%5 == 4 {
			c = stalling
		}
		app := amqpactor.New(c, amqpactor.WithCloseTimeout(5*time.Second),
			amqpactor.WithActorSystem(sys), amqpactor.WithName(fmt.Sprintf("race-%d", i)))
		_, err := app.Subscribe(amqpactor.Queue("q"), func(context.Context, *amqpactor.Message) error { return nil })
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var startErr, stopErr, stop2Err error
		start := func() { startErr = app.Start(ctx) }
		stop := func() { stopErr = app.Stop(ctx) }
		stop2 := func() { stop2Err = app.Stop(ctx) }
		// Yielding a few times first puts the Stop at different points of
		// the Start: an interleaving to try, not a synchronisation.
		lateStop := func() {
			for range i % 16 {
				runtime.Gosched()
			}
			stop()
		}
		switch i % 5 {
		case 0: // at once
			parallel(&p, start, lateStop)
		case 1: // at once, with a second Stop
			parallel(&p, start, lateStop, stop2)
		case 2: // Stop first
			p.run(stop)
			p.run(start)
			require.ErrorIs(t, startErr, amqpactor.ErrStopped, "Start after Stop")
		case 3: // Start first, then two Stops at once
			p.run(start)
			parallel(&p, stop, stop2)
		case 4: // Stop while the dial runs; the dial connects after Start gave up
			parallel(&p, start, func() { <-stalling.entered; stop() })
			require.ErrorIs(t, startErr, amqpactor.ErrStopped, "run %d: Start stopped while dialling", i)
		}
		cancel()
		require.NoError(t, stopErr, "run %d: Stop", i)
		require.NoError(t, stop2Err, "run %d: a second Stop", i)
		switch {
		case startErr == nil:
			startOK.Add(1)
		case errors.Is(startErr, amqpactor.ErrStopped):
			startStopped.Add(1)
		default:
			t.Fatalf("run %d: Start failed with neither nil nor ErrStopped: %v", i, startErr)
		}
		conns.Add(int64(b.Conns()))
		require.ErrorIs(t, app.Start(context.Background()), amqpactor.ErrStopped, "run %d: Start after Stop", i)
	}
	require.Zero(t, p.n.Load(), "panics (first: %v)", p.first)
	require.Zero(t, conns.Load(), "connections left open")
	t.Logf("FIGURES %s: runs=%d panics=%d start_ok=%d start_stopped=%d connections_left=%d",
		t.Name(), n, p.n.Load(), startOK.Load(), startStopped.Load(), conns.Load())
}

// TestPublishDuringStart: the natural `go app.Start(ctx)` then publish.
// A Publish or Request while Start runs waits for it and succeeds; one
// made before Start began fails with ErrNotStarted. Never a panic.
func TestPublishDuringStart(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	var p panics
	var published, requested, notStarted atomic.Int64
	n := runs()
	q, rpc := amqpactor.Queue("q"), amqpactor.Queue("rpc")
	for i := range n {
		b := inproc.New()
		app := amqpactor.New(b, amqpactor.WithActorSystem(sys), amqpactor.WithName(fmt.Sprintf("pub-%d", i)))
		var got atomic.Int64
		_, err := app.Subscribe(q, func(context.Context, *amqpactor.Message) error { got.Add(1); return nil })
		require.NoError(t, err)
		_, err = app.Subscribe(rpc, amqpactor.Responder(func(_ context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
			return &amqpactor.Message{Body: req.Body}, nil
		}))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var startErr, pubErr, reqErr error
		var rep *amqpactor.Message
		start := func() { startErr = app.Start(ctx) }
		pub := func() {
			runtime.Gosched()
			pubErr = app.Publish(ctx, q, &amqpactor.Message{Body: []byte("x")})
		}
		req := func() {
			rep, reqErr = app.Request(ctx, rpc, &amqpactor.Message{Body: []byte("ping")})
		}
		if i%2 == 0 {
			parallel(&p, start, pub, req)
		} else {
			parallel(&p, pub, start, req)
		}
		require.NoError(t, startErr, "run %d: Start", i)
		for what, err := range map[string]error{"Publish": pubErr, "Request": reqErr} {
			switch {
			case err == nil:
			case errors.Is(err, amqpactor.ErrNotStarted):
				notStarted.Add(1)
			default:
				t.Fatalf("run %d: %s during Start: %v", i, what, err)
			}
		}
		if pubErr == nil {
			published.Add(1)
			require.Eventually(t, func() bool { return got.Load() == 1 }, 5*time.Second, time.Millisecond, "run %d: the publish delivered", i)
		}
		if reqErr == nil {
			requested.Add(1)
			require.Equal(t, "ping", string(rep.Body), "run %d: the reply", i)
		}
		require.NoError(t, app.Stop(ctx), "run %d: Stop", i)
		require.Zero(t, b.Conns(), "run %d: connections left", i)
		cancel()
	}
	require.Zero(t, p.n.Load(), "panics (first: %v)", p.first)
	t.Logf("FIGURES %s: runs=%d panics=%d published=%d requested=%d not_started=%d",
		t.Name(), n, p.n.Load(), published.Load(), requested.Load(), notStarted.Load())
}

// TestNotStarted: before Start every call that needs a running App says
// ErrNotStarted; after Stop, ErrStopped.
func TestNotStarted(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	app := amqpactor.New(inproc.New())
	q := amqpactor.Queue("q")
	m := &amqpactor.Message{Body: []byte("x")}
	calls := func() map[string]error {
		_, reqErr := app.Request(ctx, q, m)
		_, treeErr := app.Tree(ctx)
		return map[string]error{
			"Publish":     app.Publish(ctx, q, m),
			"Request":     reqErr,
			"Transaction": app.Transaction(ctx, func(*amqpactor.Tx) error { return nil }),
			"Tree":        treeErr,
		}
	}
	for what, err := range calls() {
		require.ErrorIs(t, err, amqpactor.ErrNotStarted, what)
	}
	require.NoError(t, app.Start(ctx))
	require.NoError(t, app.Stop(ctx))
	for what, err := range calls() {
		require.ErrorIs(t, err, amqpactor.ErrStopped, what)
	}
}

// TestCancelledStartLeavesNothing: a Start whose context is cancelled, or
// ends while it runs, leaves no connection on the broker and no goroutine,
// whatever Stop does after it.
func TestCancelledStartLeavesNothing(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	const pairs = 200
	var failed, left atomic.Int64
	for i := range pairs {
		b := inproc.New()
		app := amqpactor.New(b, amqpactor.WithActorSystem(sys), amqpactor.WithName(fmt.Sprintf("cancelled-%d", i)))
		_, err := app.Subscribe(amqpactor.Queue("q"), func(context.Context, *amqpactor.Message) error { return nil })
		require.NoError(t, err)
		// Cancelled before Start, while it runs, or a deadline of a few
		// microseconds.
		ctx, cancel := harness.EarlyEnd(i, time.Duration(i%50)*time.Microsecond)
		if err := app.Start(ctx); err != nil {
			failed.Add(1)
		}
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		require.NoError(t, app.Stop(sctx))
		scancel()
		left.Add(int64(b.Conns()))
	}
	require.Zero(t, left.Load(), "connections left open")
	t.Logf("FIGURES %s: pairs=%d starts_failed=%d connections_left=%d", t.Name(), pairs, failed.Load(), left.Load())
}

// TestPublishDuringStop: publishes racing Stop either succeed or fail with
// ErrStopped soon after Stop returns; none waits out its own context.
func TestPublishDuringStop(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	q := amqpactor.Queue("q")
	for i := range runs() / 10 {
		app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName(fmt.Sprintf("stop-%d", i)))
		_, err := app.Subscribe(q, func(context.Context, *amqpactor.Message) error { return nil })
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		require.NoError(t, app.Start(ctx))
		var wg sync.WaitGroup
		var returned atomic.Int64
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				defer returned.Add(1)
				for {
					if err := app.Publish(ctx, q, &amqpactor.Message{Body: []byte("x")}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		require.NoError(t, app.Stop(ctx))
		require.Eventually(t, func() bool { return returned.Load() == 8 }, 5*time.Second, time.Millisecond,
			"run %d: publishes still waiting after Stop", i)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.ErrorIs(t, err, amqpactor.ErrStopped, "run %d", i)
		}
		cancel()
	}
}
