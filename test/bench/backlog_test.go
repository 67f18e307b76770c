package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// backlog is the number of messages waiting on the broker before the
// subscriber starts; the claim under test is that the subscriber's memory
// follows its credit window, not this number.
const backlog = 100_000

// BenchmarkLiveBacklogMemory: a quorum queue holding 100,000 messages of
// 1 KiB is drained by a slow handler (1 ms per message, 8 partitions) for a
// fixed number of deliveries, with credit 64, 256 and 1024. It reports the
// peak live heap of the process while draining (sampled every 5 ms after a
// GC-free warm-up) and that peak divided by the credit window. If memory
// followed the backlog, the peak would be ~100 MiB whatever the credit.
// Run it with -benchtime 1x: the drain (4 x credit messages, or b.N if
// larger) is the measured op. Not a timed assertion: a report.
func BenchmarkLiveBacklogMemory(b *testing.B) {
	url := liveURL(b)
	m := admin(b, url)
	for _, credit := range []uint32{64, 256, 1024} {
		b.Run(fmt.Sprintf("credit=%d", credit), func(b *testing.B) { benchBacklog(b, url, m, credit) })
	}
}

func benchBacklog(b *testing.B, url string, m *amqpwire.Management, credit uint32) {
	ctx := liveContext(b)
	name := queueName(b, m, "bench.backlog")
	declare(b, m, amqpwire.QueueSpec{Name: name})

	// Fill the queue with raw go-amqp: the backlog is the broker's.
	conn := dialRaw(b, ctx, url)
	snd := rawSender(b, ctx, rawSession(b, ctx, conn), "/queues/"+name)
	if err := sendPipelined(ctx, snd, make([]byte, 1024), backlog); err != nil {
		b.Fatalf("filling the backlog: %v", err)
	}
	_ = conn.Close()

	drain := max(b.N, int(credit)*4)
	var handled atomic.Int64
	done := make(chan struct{})
	app := amqpactor.New(amqpactor.Dial(url, amqpactor.WithDialect(amqpactor.RabbitMQ4)))
	_, err := app.Subscribe(amqpactor.Queue(name), func(ctx context.Context, _ *amqpactor.Message) error {
		time.Sleep(time.Millisecond) // the slow handler under test, not synchronisation
		if handled.Add(1) == int64(drain) {
			close(done)
		}
		return nil
	}, amqpactor.WithCredit(credit), amqpactor.WithPartitions(8))
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	b.ReportAllocs()
	b.ResetTimer()
	stop := startApp(b, ctx, app)
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
			b.Fatalf("handled %d of %d", handled.Load(), drain)
		case <-tick.C:
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
	}
	b.StopTimer()
	stop()
	grown := float64(0)
	if peak > base.HeapAlloc {
		grown = float64(peak - base.HeapAlloc)
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(grown/(1<<20), "heap-growth-MiB")
	b.ReportMetric(grown/float64(credit)/1024, "growth-KiB/credit")
	b.ReportMetric(float64(backlog), "backlog")
}
