#!/usr/bin/env bash
# run.sh — the benchmarks of docs/BENCHMARKS.md, as one A/B program run.
#
# Usage: bash test/bench/run.sh [OUTPUT] [AB FLAGS...]
#
# Runs test/bench/cmd/ab (`go run ./test/bench/cmd/ab`): amqpactor and raw
# go-amqp side by side in alternating rounds against the RabbitMQ 4 broker
# named by AMQP_URL (throughput and request/reply on quorum and classic
# queues, 100 B and 4 KiB bodies), the in-process broker with 1, 4 and 16
# partitions, the backlog memory runs and the allocation micro-benchmarks.
# It prints markdown tables (medians, ratios amqpactor/raw against the goals:
# throughput >= 1.0, request/reply p50 <= 1.05 and client CPU per round trip
# <= 1.1) and saves its whole output, progress lines
# included, to OUTPUT (default: bench.out in a new temporary directory).
# Further arguments go to the program as flags (see `go run
# ./test/bench/cmd/ab -h`), e.g. `-backlog ''` to leave the memory runs out.
#
# When AMQP_URL is unset and we are root, the test broker is started
# (test/broker/rabbitmq4.sh); otherwise the live runs skip, loudly.
#
# Environment (all optional), mapped onto the program's flags:
#   COUNT        A/B rounds (-rounds; default 3): every amqpactor run sits
#                right next to its raw run, the side that goes first
#                alternating from round to round
#   THROUGHPUT_N messages per live throughput run (-n; default 30000)
#   REQUEST_N    round trips per live request/reply run (-rpc; default 2000)
#   INPROC_N     messages per in-process run (-inproc-n; default 300000)
set -euo pipefail

cd "$(dirname "$0")/../.."

COUNT=${COUNT:-3}
THROUGHPUT_N=${THROUGHPUT_N:-30000}
REQUEST_N=${REQUEST_N:-2000}
INPROC_N=${INPROC_N:-300000}
OUT=$(mktemp -d)/bench.out
if [ $# -gt 0 ] && [[ $1 != -* ]]; then
	OUT=$1
	shift
fi

if [ -z "${AMQP_URL:-}" ]; then
	if [ "$(id -u)" -eq 0 ]; then
		bash test/broker/rabbitmq4.sh start
		AMQP_URL="$(bash test/broker/rabbitmq4.sh url)"
		export AMQP_URL
	else
		echo "run.sh: AMQP_URL is not set and we are not root: the LIVE BENCHMARKS WILL SKIP" >&2
	fi
fi

status=0
go run ./test/bench/cmd/ab -rounds "$COUNT" -n "$THROUGHPUT_N" -rpc "$REQUEST_N" -inproc-n "$INPROC_N" "$@" 2>&1 | tee "$OUT" || status=$?

echo
echo "output saved to $OUT"
# Non-zero only when a run failed (or the program could not start), never
# because a goal was missed.
exit "$status"
