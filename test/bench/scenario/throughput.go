package scenario

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// ThroughputActor is one end-to-end at-least-once run of amqpactor: an App
// with Dial(URL, WithDialect(RabbitMQ4)) and Subscribe(Queue(name), handler,
// WithCredit(Credit)) with the default 8 partitions (plus WithClassicQueue
// for a classic queue); the App declares the queue. Window goroutines call
// app.Publish, each waiting for its outcome, so Window publishes are in
// flight, pipelined on the sender's link. The handler counts and returns nil
// (accept). Publisher session and subscription session share the App's one
// connection. One op is one message received and accepted; the clock stops
// when all N have been handled and all N publishes have their outcome.
func ThroughputActor(ctx context.Context, p Params, m *amqpwire.Management) (Result, error) {
	return actorRun(ctx, p, m, "bench.tput.amqpactor", amqpactor.Dial(p.URL, amqpactor.WithDialect(amqpactor.RabbitMQ4)), false)
}

// actorRun is one throughput run of an App on connector c: its queue named
// from prefix, appThroughput (async: one goroutine with PublishAsync), the
// App stopped, the queue found empty.
func actorRun(ctx context.Context, p Params, m *amqpwire.Management, prefix string, c amqpactor.Connector, async bool) (res Result, err error) {
	if p, err = p.normalize(); err != nil {
		return Result{}, err
	}
	var cl cleanups
	defer func() { err = errors.Join(err, cl.run()) }()
	name := queueName(&cl, m, prefix)
	res, stop, err := appThroughput(ctx, &cl, amqpactor.New(c), name, subscribeOptions(p), p.Window, p.Body, p.N, p.OnStart, p.OnStop, async)
	if err != nil {
		return Result{}, err
	}
	if err := stop(); err != nil {
		return Result{}, err
	}
	return res, checkQueue(m, name, p.Queue, 0)
}

// ThroughputActorAsync is ThroughputActor with one publishing goroutine:
// it calls app.PublishAsync and keeps Window receipts outstanding, waiting
// for the oldest before the next publish, the way a service publishing
// from one loop would use it.
func ThroughputActorAsync(ctx context.Context, p Params, m *amqpwire.Management) (Result, error) {
	return actorRun(ctx, p, m, "bench.tput.async", amqpactor.Dial(p.URL, amqpactor.WithDialect(amqpactor.RabbitMQ4)), true)
}

// liveApp is the App of a live run, on p's broker with the RabbitMQ4
// dialect, and the options of its subscription (subscribeOptions).
func liveApp(p Params) (*amqpactor.App, []amqpactor.SubscribeOption) {
	return amqpactor.New(amqpactor.Dial(p.URL, amqpactor.WithDialect(amqpactor.RabbitMQ4))), subscribeOptions(p)
}

// subscribeOptions are the options of a live run's subscription: p's
// credit, and a classic queue when p asks for one.
func subscribeOptions(p Params) []amqpactor.SubscribeOption {
	opts := []amqpactor.SubscribeOption{amqpactor.WithCredit(uint32(p.Credit))}
	if p.Queue == Classic {
		opts = append(opts, amqpactor.WithClassicQueue())
	}
	return opts
}

// appThroughput is the App side of a throughput run, live or in-process: a
// counting handler on Queue(name) (with opts), the App started, one message
// seen through (which attaches the sender link), then n messages timed,
// published by publishers goroutines that each wait for their outcome (so
// that many are in flight, pipelined on the sender's link). The clock stops
// when all n have been handled. With async, one goroutine publishes with
// PublishAsync, publishers receipts outstanding. It returns the App's stop
// for the caller's checks after the clock.
func appThroughput(ctx context.Context, cl *cleanups, app *amqpactor.App, name string, opts []amqpactor.SubscribeOption,
	publishers, bodySize, n int, onStart, onStop func(), async bool) (res Result, stop func() error, err error) {
	var handled, target atomic.Int64
	target.Store(1) // the warm-up message
	done := make(chan struct{}, 1)
	if _, err := app.Subscribe(amqpactor.Queue(name), func(context.Context, *amqpactor.Message) error {
		if handled.Add(1) == target.Load() {
			done <- struct{}{}
		}
		return nil
	}, opts...); err != nil {
		return Result{}, nil, err
	}
	if stop, err = startApp(ctx, cl, app); err != nil {
		return Result{}, nil, err
	}
	body := make([]byte, bodySize)
	if err := app.Publish(ctx, amqpactor.Queue(name), &amqpactor.Message{Body: body}); err != nil {
		return Result{}, nil, fmt.Errorf("warm-up publish: %w", err)
	}
	if err := waitHandled(ctx, done, &handled, 1); err != nil {
		return Result{}, nil, fmt.Errorf("warm-up: %w", err)
	}
	total := int64(n)
	handled.Store(0)
	target.Store(total)

	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	mt := startMeter(onStart, onStop)
	var next atomic.Int64
	var wg sync.WaitGroup
	if async {
		wg.Go(func() { publishAsync(rctx, cancel, app, name, body, publishers, total) })
	} else {
		for range publishers {
			wg.Go(func() {
				for next.Add(1) <= total {
					if err := app.Publish(rctx, amqpactor.Queue(name), &amqpactor.Message{Body: body}); err != nil {
						cancel(fmt.Errorf("publish: %w", err))
						return
					}
				}
			})
		}
	}
	wg.Wait()
	err = waitHandled(rctx, done, &handled, total)
	res = mt.stop(n)
	if err != nil {
		return Result{}, nil, err
	}
	return res, stop, nil
}

// publishAsync publishes total messages from one goroutine, window receipts
// outstanding.
func publishAsync(ctx context.Context, cancel context.CancelCauseFunc, app *amqpactor.App, name string, body []byte, window int, total int64) {
	inflight := make([]*amqpactor.Receipt, 0, window)
	for i := int64(0); i < total; i++ {
		if len(inflight) == window {
			if err := inflight[0].Wait(ctx); err != nil {
				cancel(fmt.Errorf("publish: %w", err))
				return
			}
			inflight = inflight[1:]
		}
		inflight = append(inflight, app.PublishAsync(ctx, amqpactor.Queue(name), &amqpactor.Message{Body: body}))
	}
	for _, r := range inflight {
		if err := r.Wait(ctx); err != nil {
			cancel(fmt.Errorf("publish: %w", err))
			return
		}
	}
}

// startApp starts app and has cl stop it; stop stops it now (once).
func startApp(ctx context.Context, cl *cleanups, app *amqpactor.App) (stop func() error, err error) {
	if err := app.Start(ctx); err != nil {
		return nil, err
	}
	var once sync.Once
	var stopErr error
	stop = func() error {
		once.Do(func() {
			sctx, cancel := bounded()
			defer cancel()
			if err := app.Stop(sctx); err != nil {
				stopErr = fmt.Errorf("stop: %w", err)
			}
		})
		return stopErr
	}
	cl.add(stop)
	return stop, nil
}

// waitHandled waits for done, or fails with ctx's cause.
func waitHandled(ctx context.Context, done <-chan struct{}, handled *atomic.Int64, n int64) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("handled %d of %d: %w", handled.Load(), n, context.Cause(ctx))
	}
}

// ThroughputRaw is ThroughputActor with go-amqp alone, on one connection:
// the queue is declared through Management exactly as the App declares it
// and addressed as /queues/NAME; a sender and a receiver, each on its own
// session like the App. One goroutine writes with SendWithReceipt while
// fewer than Window transfers await their outcome, a second awaits the
// receipts in order and frees a slot for each accepted one. The receiver
// has go-amqp's own credit management (Credit), settle modes
// unsettled/first as amqpactor asks, and one goroutine does Receive +
// AcceptMessage per message.
func ThroughputRaw(ctx context.Context, p Params, m *amqpwire.Management) (res Result, err error) {
	if p, err = p.normalize(); err != nil {
		return Result{}, err
	}
	var cl cleanups
	defer func() { err = errors.Join(err, cl.run()) }()
	name := queueName(&cl, m, "bench.tput.raw")
	if err := declare(ctx, m, p.Queue.spec(name)); err != nil {
		return Result{}, err
	}
	addr := "/queues/" + name
	conn, err := dialRaw(ctx, &cl, p.URL, "bench-raw")
	if err != nil {
		return Result{}, err
	}
	_, snd, err := rawSenderSession(ctx, conn, addr)
	if err != nil {
		return Result{}, err
	}
	rcv, err := rawReceiverSession(ctx, conn, addr, p.Credit, false)
	if err != nil {
		return Result{}, err
	}
	body := make([]byte, p.Body)

	// Warm up: one message through.
	if err := snd.Send(ctx, amqp.NewMessage(body), nil); err != nil {
		return Result{}, fmt.Errorf("warm-up send: %w", err)
	}
	if msg, err := rcv.Receive(ctx, nil); err != nil {
		return Result{}, fmt.Errorf("warm-up receive: %w", err)
	} else if err := rcv.AcceptMessage(ctx, msg); err != nil {
		return Result{}, fmt.Errorf("warm-up accept: %w", err)
	}

	// A failure on either side cancels the other; the first one is the
	// run's error.
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	total := p.N
	mt := startMeter(p.OnStart, p.OnStop)
	received := receiveN(cancel, total, func() error {
		msg, err := rcv.Receive(rctx, nil)
		if err == nil {
			err = rcv.AcceptMessage(rctx, msg)
		}
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		return nil
	})
	if err := sendPipelined(rctx, snd, body, total, p.Window); err != nil {
		cancel(fmt.Errorf("send: %w", err))
	}
	<-received
	res = mt.stop(total)
	if err := context.Cause(rctx); err != nil {
		return Result{}, err
	}
	closeLinks(snd, rcv)
	return res, checkQueue(m, name, p.Queue, 0)
}
