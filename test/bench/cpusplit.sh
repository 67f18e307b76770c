#!/usr/bin/env bash
# cpusplit.sh — where the CPU time of a benchmark run went, from the profiles
# `go run ./test/bench/cmd/ab -cpuprofile DIR` writes (one per live run).
#
# Usage: bash test/bench/cpusplit.sh PROFILE...
#
# Prints a markdown row per profile: the CPU time sampled, then the share of
# it (whole stacks, each sample counted once, in this order) under go-amqp,
# the garbage collector's own goroutines, the scheduler (goroutines parking
# and idle threads looking for work), the coalescing writer's socket writes,
# and the rest: amqpactor's own code, or the raw benchmark's loop. go-amqp's
# share includes the reads through the inbound guard and, for raw go-amqp,
# its socket writes.
set -euo pipefail

if [ $# -eq 0 ]; then
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi

amqp='github.com/Azure/go-amqp'
gc='runtime.gcBgMarkWorker|runtime.bgsweep|runtime.bgscavenge'
sched='runtime.mcall|runtime.mstart|runtime.morestack'
writes='coalesce.\(\*Conn\)'

# share prints the percentage of all samples that the pprof filters select.
share() {
  local p
  p=$(go tool pprof -top -nodefraction=0 -edgefraction=0 -nodecount=1000000 "$@" 2>/dev/null |
    sed -n 's/^Showing nodes accounting for [^,]*, \([0-9.]*\)% of .*/\1/p')
  echo "${p:-0}"
}

echo "| profile | CPU sampled | go-amqp | GC | scheduler | socket writes (coalescer) | the rest |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for f in "$@"; do
  total=$(go tool pprof -top -nodecount=1 "$f" 2>/dev/null | sed -n 's/.*Total samples = \([^ ]*\).*/\1/p')
  a=$(share -focus "$amqp" "$f")
  g=$(share -focus "$gc" -ignore "$amqp" "$f")
  s=$(share -focus "$sched" -ignore "$amqp|$gc" "$f")
  w=$(share -focus "$writes" -ignore "$amqp|$gc|$sched" "$f")
  rest=$(awk -v a="$a" -v g="$g" -v s="$s" -v w="$w" 'BEGIN { printf "%.1f", 100 - a - g - s - w }')
  printf '| %s | %s | %s%% | %s%% | %s%% | %s%% | %s%% |\n' "$(basename "$f" .pprof)" "$total" "$a" "$g" "$s" "$w" "$rest"
done
