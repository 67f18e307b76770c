#!/usr/bin/env bash
# run.sh — the benchmarks of docs/BENCHMARKS.md, and their summary.
#
# Usage: bash test/bench/run.sh [OUTPUT]
#
# Runs the in-process benchmark and the live ones (amqpactor and raw go-amqp
# side by side, against the RabbitMQ 4 broker named by AMQP_URL), saves the
# raw `go test` output to OUTPUT (default: bench.out in a new temporary
# directory) and prints a summary: medians, and the ratios amqpactor/raw
# against the goals (throughput >= 0.9, latency <= 1.2).
#
# When AMQP_URL is unset and we are root, the test broker is started
# (test/broker/rabbitmq4.sh); otherwise the live benchmarks skip.
#
# Environment (all optional):
#   COUNT        runs of every benchmark (default 3). The in-process one runs
#                with -count=COUNT; the live ones run as COUNT rounds of
#                -count=1, so every amqpactor run sits next to its raw run
#                under the same machine conditions.
#   THROUGHPUT_N messages per live throughput run (default 30000)
#   REQUEST_N    round trips per live request/reply run (default 2000)
#   INPROC_TIME  -benchtime of the in-process benchmark (default 1s)
set -euo pipefail

cd "$(dirname "$0")/../.."

COUNT=${COUNT:-3}
THROUGHPUT_N=${THROUGHPUT_N:-30000}
REQUEST_N=${REQUEST_N:-2000}
INPROC_TIME=${INPROC_TIME:-1s}
OUT=${1:-"$(mktemp -d)/bench.out"}

if [ -z "${AMQP_URL:-}" ]; then
	if [ "$(id -u)" -eq 0 ]; then
		bash test/broker/rabbitmq4.sh start
		AMQP_URL="$(bash test/broker/rabbitmq4.sh url)"
		export AMQP_URL
	else
		echo "run.sh: AMQP_URL is not set and we are not root: the LIVE BENCHMARKS WILL SKIP" >&2
	fi
fi

bench() {
	go test -run '^$' -benchmem "$@" ./test/bench/ 2>&1 | tee -a "$OUT"
}

: >"$OUT"
{
	echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); $(go version); $(nproc) CPUs; load average: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
} | tee -a "$OUT"

bench -bench '^BenchmarkInprocEndToEnd$' -benchtime="$INPROC_TIME" -count="$COUNT"
for round in $(seq 1 "$COUNT"); do
	echo "# live round $round of $COUNT" | tee -a "$OUT"
	bench -bench '^BenchmarkLiveThroughput$' -benchtime="${THROUGHPUT_N}x" -count=1
	bench -bench '^BenchmarkLiveRequestReply$' -benchtime="${REQUEST_N}x" -count=1
done

echo
echo "raw output: $OUT"
echo
go run ./test/bench/cmd/benchsummary "$OUT"
