package bench

import (
	"testing"
	"time"

	"github.com/amqpactor/amqpactor/test/bench/scenario"

	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// The tests here run every scenario once with tiny numbers, so that the code
// of the benchmarks and of test/bench/cmd/ab cannot rot unnoticed. They
// measure nothing. The live ones read AMQP_URL; without it they skip
// loudly, and under REQUIRE_LIVE=1 (CI) they fail instead.

func brokerURL(t *testing.T) string {
	t.Helper()
	return livetest.URL(t, "the live scenario smoke tests")
}

func TestLiveScenarios(t *testing.T) {
	url := brokerURL(t)
	m := admin(t, url)
	for _, q := range []scenario.QueueType{scenario.Quorum, scenario.Classic} {
		t.Run(string(q), func(t *testing.T) {
			for _, tc := range []struct {
				name string
				run  liveRun
				n    int
				rpc  bool
			}{
				{"ThroughputActor", scenario.ThroughputActor, 200, false},
				{"ThroughputRaw", scenario.ThroughputRaw, 200, false},
				{"RequestActor", scenario.RequestActor, 20, true},
				{"RequestRaw", scenario.RequestRaw, 20, true},
			} {
				t.Run(tc.name, func(t *testing.T) {
					res, err := tc.run(liveContext(t), scenario.Params{
						URL: url, Queue: q, Body: 100, Credit: 64, Window: 32, N: tc.n,
					}, m)
					if err != nil {
						t.Fatal(err)
					}
					if res.N != tc.n || res.Elapsed <= 0 || res.Rate() <= 0 || res.Mallocs == 0 {
						t.Fatalf("implausible result %+v", res)
					}
					if tc.rpc != (len(res.Latencies) == tc.n) {
						t.Fatalf("%d latencies for %d round trips", len(res.Latencies), tc.n)
					}
					if tc.rpc && (res.Percentile(0.5) <= 0 || res.Percentile(0.99) < res.Percentile(0.5)) {
						t.Fatalf("p50 %v, p99 %v", res.Percentile(0.5), res.Percentile(0.99))
					}
				})
			}
		})
	}
	t.Run("Backlog", func(t *testing.T) {
		res, err := scenario.Backlog(liveContext(t), scenario.BacklogParams{
			URL: url, Credit: 16, Backlog: 500, Drain: 64,
		}, m)
		if err != nil {
			t.Fatal(err)
		}
		if res.Handled < 64 || res.PeakHeap == 0 {
			t.Fatalf("implausible result %+v", res)
		}
	})
}

func TestInprocScenario(t *testing.T) {
	res, err := scenario.InprocThroughput(liveContext(t), scenario.InprocParams{
		Publishers: 8, Partitions: 4, Credit: 64, N: 2000,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.N != 2000 || res.Rate() <= 0 || res.Mallocs == 0 || res.Latencies != nil {
		t.Fatalf("implausible result %+v", res)
	}
}

func TestResult(t *testing.T) {
	r := scenario.Result{
		N: 4, Elapsed: 2 * time.Second, CPU: 8 * time.Millisecond, CPUOK: true, Mallocs: 10, Bytes: 400,
		Latencies: []time.Duration{4, 1, 3, 2},
	}
	if r.Rate() != 2 || r.CPUPerOp() != 2*time.Millisecond || r.AllocsPerOp() != 2.5 || r.BytesPerOp() != 100 {
		t.Fatalf("rate %v, cpu/op %v, allocs/op %v, B/op %v", r.Rate(), r.CPUPerOp(), r.AllocsPerOp(), r.BytesPerOp())
	}
	if p := r.Percentile(0); p != 1 {
		t.Fatalf("p0 %v", p)
	}
	if p := r.Percentile(0.5); p != 2 {
		t.Fatalf("p50 %v", p)
	}
	if p := r.Percentile(1); p != 4 {
		t.Fatalf("p100 %v", p)
	}
	r.CPUOK = false
	if r.CPUPerOp() != 0 || (scenario.Result{}).Percentile(0.5) != 0 || (scenario.Result{}).Rate() != 0 {
		t.Fatal("zero results must report zeros")
	}
}
