package bench

import (
	"fmt"
	"testing"

	"github.com/amqpactor/amqpactor/test/bench/scenario"
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
// larger) is the measured op. Not a timed assertion: a report. See
// scenario.Backlog.
func BenchmarkLiveBacklogMemory(b *testing.B) {
	url := liveURL(b)
	m := admin(b, url)
	for _, credit := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("credit=%d", credit), func(b *testing.B) {
			b.ReportAllocs()
			res, err := scenario.Backlog(liveContext(b), scenario.BacklogParams{
				URL: url, Credit: credit, Backlog: backlog, Drain: max(b.N, 4*credit),
				OnStart: b.ResetTimer, OnStop: b.StopTimer,
			}, m)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(res.PeakHeap)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(res.Growth())/(1<<20), "heap-growth-MiB")
			b.ReportMetric(res.GrowthPerCredit()/1024, "growth-KiB/credit")
			b.ReportMetric(float64(res.Backlog), "backlog")
		})
	}
}
