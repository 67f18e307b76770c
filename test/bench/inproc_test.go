package bench

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// BenchmarkInprocEndToEnd: publish -> in-process broker -> receiver ->
// dispatcher -> partition -> handler -> accept, with publishers in parallel
// (pipelined through the sender actor). One op is one message handled.
func BenchmarkInprocEndToEnd(b *testing.B) {
	for _, tc := range []struct {
		name       string
		publishers int
		partitions int
		credit     uint32
	}{
		{"publishers=64/partitions=8/credit=256", 64, 8, 256},
		{"publishers=256/partitions=8/credit=256", 256, 8, 256},
		{"publishers=1024/partitions=8/credit=1024", 1024, 8, 1024},
		{"publishers=64/partitions=1/credit=256", 64, 1, 256},
		{"publishers=64/partitions=4/credit=256", 64, 4, 256},
		{"publishers=64/partitions=16/credit=256", 64, 16, 256},
	} {
		b.Run(tc.name, func(b *testing.B) { benchInproc(b, tc.publishers, tc.partitions, tc.credit) })
	}
}

func benchInproc(b *testing.B, publishers, partitions int, credit uint32) {
	app := amqpactor.New(inproc.New())
	var handled atomic.Int64
	done := make(chan struct{})
	total := int64(b.N)
	_, err := app.Subscribe(amqpactor.Queue("bench"), func(ctx context.Context, m *amqpactor.Message) error {
		if handled.Add(1) == total {
			close(done)
		}
		return nil
	}, amqpactor.WithCredit(credit), amqpactor.WithPartitions(partitions))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = app.Stop(context.Background()) }()
	body := make([]byte, 100)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= total {
				if err := app.Publish(ctx, amqpactor.Queue("bench"), &amqpactor.Message{Body: body}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatalf("handled %d of %d", handled.Load(), total)
	}
	b.StopTimer()
	b.ReportMetric(float64(total)/time.Since(start).Seconds(), "msg/s")
	b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "procs")
}
