package bench

import (
	"testing"

	"github.com/amqpactor/amqpactor/test/bench/scenario"
)

// BenchmarkLiveThroughput091 is BenchmarkLiveThroughput over AMQP 0-9-1:
// amqpactor on Dial091 beside raw amqp091-go, same queue, body, window and
// credit (prefetch). See scenario.ThroughputActor091 and
// scenario.ThroughputRaw091.
func BenchmarkLiveThroughput091(b *testing.B) {
	url := liveURL(b)
	m := admin(b, url)
	b.Run("amqpactor-091", func(b *testing.B) { benchThroughput(b, scenario.ThroughputActor091, url, m) })
	b.Run("raw-amqp091-go", func(b *testing.B) { benchThroughput(b, scenario.ThroughputRaw091, url, m) })
}
