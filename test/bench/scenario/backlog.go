package scenario

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// BacklogParams are the settings of one backlog run.
type BacklogParams struct {
	// URL names the RabbitMQ 4 broker.
	URL string
	// Credit is the subscription's credit: the claim under test is that
	// the subscriber's memory follows it, not the backlog.
	Credit int
	// Backlog is how many messages wait on the broker before the
	// subscriber starts; zero means 100,000.
	Backlog int
	// Drain is how many deliveries the measured part waits for; zero means
	// 4 x Credit. It must not exceed Backlog.
	Drain int
	// Body is the body size; zero means 1 KiB.
	Body int
	// Partitions is the subscription's partition count; zero means 8.
	Partitions int
	// HandlerDelay is what the slow handler sleeps per message; zero means
	// 1 ms.
	HandlerDelay time.Duration
	// OnStart and OnStop as in Params.
	OnStart, OnStop func()
}

// BacklogResult is what a backlog run reports.
type BacklogResult struct {
	Credit, Backlog, Drain int
	// Handled is how many messages the handler saw by the time the App had
	// stopped (Drain, plus those in flight when the clock stopped).
	Handled int
	// BaseHeap is the live heap after a GC before the App starts; PeakHeap
	// the largest heap in use sampled every 5 ms while draining.
	BaseHeap, PeakHeap uint64
	// Elapsed is the wall time of the drain, the App's start included.
	Elapsed time.Duration
}

// Growth is how far the heap rose above its base while draining.
func (r BacklogResult) Growth() uint64 {
	if r.PeakHeap > r.BaseHeap {
		return r.PeakHeap - r.BaseHeap
	}
	return 0
}

// GrowthPerCredit is Growth divided by the credit, in bytes.
func (r BacklogResult) GrowthPerCredit() float64 {
	if r.Credit <= 0 {
		return 0
	}
	return float64(r.Growth()) / float64(r.Credit)
}

// Backlog fills a fresh durable quorum queue with Backlog messages of Body
// bytes (raw go-amqp, outside the clock), then starts an App whose slow
// handler (HandlerDelay per message, Partitions partitions, credit Credit)
// drains Drain of them, and reports the peak heap of the process while
// draining. If memory followed the backlog rather than the credit, the
// peak would be about Backlog x Body whatever the credit. After the App has
// stopped, the queue must hold exactly Backlog - Handled messages: every
// message handled was accepted, the others went back to the queue.
func Backlog(ctx context.Context, p BacklogParams, m *amqpwire.Management) (res BacklogResult, err error) {
	if p.URL == "" {
		return BacklogResult{}, errors.New("scenario: BacklogParams.URL is empty")
	}
	if p.Credit <= 0 {
		return BacklogResult{}, fmt.Errorf("scenario: BacklogParams.Credit is %d, want > 0", p.Credit)
	}
	if p.Backlog <= 0 {
		p.Backlog = 100_000
	}
	if p.Drain <= 0 {
		p.Drain = 4 * p.Credit
	}
	if p.Drain > p.Backlog {
		return BacklogResult{}, fmt.Errorf("scenario: drain %d exceeds the backlog %d", p.Drain, p.Backlog)
	}
	if p.Body <= 0 {
		p.Body = 1024
	}
	if p.Partitions <= 0 {
		p.Partitions = 8
	}
	if p.HandlerDelay <= 0 {
		p.HandlerDelay = time.Millisecond
	}
	var cl cleanups
	defer func() { err = errors.Join(err, cl.run()) }()
	name := queueName(&cl, m, "bench.backlog")
	if err := declare(ctx, m, Quorum.spec(name)); err != nil {
		return BacklogResult{}, err
	}
	if err := fill(ctx, p.URL, "/queues/"+name, p.Body, p.Backlog); err != nil {
		return BacklogResult{}, fmt.Errorf("filling the backlog: %w", err)
	}

	var handled atomic.Int64
	done := make(chan struct{})
	app := amqpactor.New(amqpactor.Dial(p.URL, amqpactor.WithDialect(amqpactor.RabbitMQ4)))
	drain := int64(p.Drain)
	if _, err := app.Subscribe(amqpactor.Queue(name), func(context.Context, *amqpactor.Message) error {
		time.Sleep(p.HandlerDelay) // the slow handler under test, not synchronisation
		if handled.Add(1) == drain {
			close(done)
		}
		return nil
	}, amqpactor.WithCredit(uint32(p.Credit)), amqpactor.WithPartitions(p.Partitions)); err != nil {
		return BacklogResult{}, err
	}
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	if p.OnStart != nil {
		p.OnStart()
	}
	t0 := time.Now()
	stop, err := startApp(ctx, &cl, app)
	if err != nil {
		return BacklogResult{}, err
	}
	var peak uint64
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var ms runtime.MemStats
sample:
	for {
		select {
		case <-done:
			break sample
		case <-ctx.Done():
			return BacklogResult{}, fmt.Errorf("handled %d of %d: %w", handled.Load(), drain, context.Cause(ctx))
		case <-tick.C:
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
	}
	elapsed := time.Since(t0)
	if p.OnStop != nil {
		p.OnStop()
	}
	if err := stop(); err != nil {
		return BacklogResult{}, err
	}
	res = BacklogResult{
		Credit: p.Credit, Backlog: p.Backlog, Drain: p.Drain, Handled: int(handled.Load()),
		BaseHeap: base.HeapAlloc, PeakHeap: peak, Elapsed: elapsed,
	}
	return res, checkQueue(m, name, Quorum, uint64(p.Backlog-res.Handled))
}

// fill publishes n messages of body bytes to addr with raw go-amqp, on a
// connection of its own, pipelined with the default window.
func fill(ctx context.Context, url, addr string, body, n int) (err error) {
	var cl cleanups
	defer func() { err = errors.Join(err, cl.run()) }()
	conn, err := dialRaw(ctx, &cl, url, "bench-fill")
	if err != nil {
		return err
	}
	sess, err := rawSession(ctx, conn)
	if err != nil {
		return err
	}
	snd, err := rawSender(ctx, sess, addr)
	if err != nil {
		return err
	}
	return sendPipelined(ctx, snd, make([]byte, body), n, DefaultWindow)
}
