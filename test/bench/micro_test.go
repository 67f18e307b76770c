package bench

import (
	"testing"

	"github.com/amqpactor/amqpactor/test/bench/scenario"
)

// BenchmarkMicro: the allocation micro-benchmarks of the hot paths that
// test/bench/cmd/ab reports (see scenario.MicroBenchmarks).
func BenchmarkMicro(b *testing.B) {
	for _, mb := range scenario.MicroBenchmarks() {
		b.Run(mb.Name, mb.F)
	}
}
