package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor/test/bench/scenario"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// The live benchmarks run amqpactor and raw go-amqp side by side against the
// RabbitMQ 4 broker named by AMQP_URL, e.g. the test broker:
//
//	bash test/broker/rabbitmq4.sh start
//	AMQP_URL=$(bash test/broker/rabbitmq4.sh url) go test -run '^$' -bench Live -benchmem ./test/bench/
//
// They are thin wrappers over package scenario, with the parameters of
// docs/BENCHMARKS.md: a quorum queue, 100-byte bodies, credit 256 and an
// in-flight window of 256. The A/B program test/bench/cmd/ab runs the same
// scenarios over classic queues and 4 KiB bodies too, in alternating rounds.
// Every run uses queues of its own (a random suffix) and deletes them
// afterwards, so runs never see each other's messages.

const (
	// liveCredit is the receiver's link credit on both sides.
	liveCredit = 256
	// liveWindow is how many publishes may await their outcome at once on
	// both sides.
	liveWindow = 256
	// liveBody is the body size of every message.
	liveBody = 100
)

func liveURL(b *testing.B) string {
	b.Helper()
	u := os.Getenv("AMQP_URL")
	if u == "" {
		const msg = "AMQP_URL is not set: SKIPPING THE LIVE RabbitMQ 4 BENCHMARKS. " +
			"Start the test broker with `bash test/broker/rabbitmq4.sh start` and set " +
			"AMQP_URL=$(bash test/broker/rabbitmq4.sh url), or run `bash test/bench/run.sh`"
		// go test shows a benchmark's skip message only with -v: say it
		// on stderr too, once, so that a plain -bench run cannot miss it.
		skipOnce.Do(func() { fmt.Fprintln(os.Stderr, "bench: "+msg) })
		b.Skip(msg)
	}
	return u
}

var skipOnce sync.Once

// admin opens the connection through which the scenarios declare, check and
// delete their queues (RabbitMQ 4's management node). It is never measured.
func admin(tb testing.TB, url string) *amqpwire.Management {
	tb.Helper()
	conn, err := scenario.Admin(context.Background(), url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn.Management()
}

func liveContext(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	tb.Cleanup(cancel)
	return ctx
}

// liveParams are the parameters of docs/BENCHMARKS.md for b.N ops, with
// the benchmark's timer around the measured part.
func liveParams(b *testing.B, url string) scenario.Params {
	return scenario.Params{
		URL: url, Queue: scenario.Quorum, Body: liveBody, Credit: liveCredit, Window: liveWindow,
		N: b.N, OnStart: b.ResetTimer, OnStop: b.StopTimer,
	}
}

type liveRun func(context.Context, scenario.Params, *amqpwire.Management) (scenario.Result, error)

// reportCPU adds cpu-µs/op: client CPU per op, a figure the broker's speed
// and other load on the machine disturb far less than the rate does.
func reportCPU(b *testing.B, res scenario.Result) {
	if res.CPUOK {
		b.ReportMetric(float64(res.CPUPerOp())/float64(time.Microsecond), "cpu-µs/op")
	}
	b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "procs")
}

// BenchmarkLiveThroughput: end-to-end at-least-once on a fresh RabbitMQ 4
// quorum queue, 100-byte messages. Publishes are pipelined with at most 256
// awaiting their outcome; the receiver has credit 256 and accepts every
// message. One op is one message received and accepted. Both sides publish
// and consume on one connection, in separate sessions; amqpactor-async
// publishes from one goroutine with PublishAsync. See
// scenario.ThroughputActor(Async) and scenario.ThroughputRaw.
func BenchmarkLiveThroughput(b *testing.B) {
	url := liveURL(b)
	m := admin(b, url)
	b.Run("amqpactor", func(b *testing.B) { benchThroughput(b, scenario.ThroughputActor, url, m) })
	b.Run("amqpactor-async", func(b *testing.B) { benchThroughput(b, scenario.ThroughputActorAsync, url, m) })
	b.Run("raw-go-amqp", func(b *testing.B) { benchThroughput(b, scenario.ThroughputRaw, url, m) })
}

func benchThroughput(b *testing.B, run liveRun, url string, m *amqpwire.Management) {
	b.ReportAllocs()
	b.SetBytes(liveBody)
	res, err := run(liveContext(b), liveParams(b, url), m)
	if err != nil {
		b.Fatal(err)
	}
	reportCPU(b, res)
	b.ReportMetric(res.Rate(), "msg/s")
}

// BenchmarkLiveRequestReply: sequential request/reply round trips on
// RabbitMQ 4, 100-byte request and reply. The request queue is a quorum
// queue; replies go to a private classic reply queue and arrive pre-settled.
// The responder receives with credit 256, publishes the reply at-least-once
// (waits for its outcome) and then accepts the request. One op is one round
// trip; p50 and p99 are the round-trip latencies in microseconds. See
// scenario.RequestActor and scenario.RequestRaw.
func BenchmarkLiveRequestReply(b *testing.B) {
	url := liveURL(b)
	m := admin(b, url)
	b.Run("amqpactor", func(b *testing.B) { benchRequest(b, scenario.RequestActor, url, m) })
	b.Run("raw-go-amqp", func(b *testing.B) { benchRequest(b, scenario.RequestRaw, url, m) })
}

func benchRequest(b *testing.B, run liveRun, url string, m *amqpwire.Management) {
	b.ReportAllocs()
	res, err := run(liveContext(b), liveParams(b, url), m)
	if err != nil {
		b.Fatal(err)
	}
	reportCPU(b, res)
	b.ReportMetric(float64(res.Percentile(0.50))/float64(time.Microsecond), "p50-µs")
	b.ReportMetric(float64(res.Percentile(0.99))/float64(time.Microsecond), "p99-µs")
}
