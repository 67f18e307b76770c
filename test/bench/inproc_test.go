package bench

import (
	"runtime"
	"testing"

	"github.com/amqpactor/amqpactor/test/bench/scenario"
)

// BenchmarkInprocEndToEnd: publish -> in-process broker -> receiver ->
// partition -> handler -> accept, with publishers in parallel
// (pipelined on the sender's link). One op is one message handled. See
// scenario.InprocThroughput.
func BenchmarkInprocEndToEnd(b *testing.B) {
	for _, tc := range []struct {
		name       string
		publishers int
		partitions int
		credit     int
	}{
		{"publishers=64/partitions=8/credit=256", 64, 8, 256},
		{"publishers=256/partitions=8/credit=256", 256, 8, 256},
		{"publishers=1024/partitions=8/credit=1024", 1024, 8, 1024},
		{"publishers=64/partitions=1/credit=256", 64, 1, 256},
		{"publishers=64/partitions=4/credit=256", 64, 4, 256},
		{"publishers=64/partitions=16/credit=256", 64, 16, 256},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(scenario.DefaultBody)
			res, err := scenario.InprocThroughput(liveContext(b), scenario.InprocParams{
				Publishers: tc.publishers, Partitions: tc.partitions, Credit: tc.credit,
				Body: scenario.DefaultBody, N: b.N, OnStart: b.ResetTimer, OnStop: b.StopTimer,
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.Rate(), "msg/s")
			// allocs/op without -benchmem's rounding down.
			b.ReportMetric(float64(res.Mallocs)/float64(b.N), "mallocs/msg")
			if res.CPUOK {
				// The process's CPU per message: on a shared machine
				// steadier than the rate.
				b.ReportMetric(float64(res.CPU.Microseconds())/float64(b.N), "cpu-µs/msg")
			}
			b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "procs")
		})
	}
}
