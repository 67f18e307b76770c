#!/usr/bin/env bash
# Builds every example and runs each one on the in-process broker, each
# bounded by a timeout (EXAMPLE_TIMEOUT seconds, 30 by default); fails if any
# example fails to build, exits non-zero or runs past its timeout.
#
# Arguments are passed to every example, e.g. to run them all on a live
# broker:  examples/run-all.sh -url amqp://guest:guest@127.0.0.1:5673/
# (RabbitMQ 4, the examples' default dialect), or on ActiveMQ Artemis:
#          examples/run-all.sh -url amqp://artemis:artemis@127.0.0.1:5682/ -dialect artemis
# Every example exits 0 on both; the transactions example says that live
# AMQP 1.0 has no transactions yet and exits 0, on either broker alike.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
limit="${EXAMPLE_TIMEOUT:-30}"

bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT

names=()
for dir in examples/*/; do
	name="$(basename "$dir")"
	[ "$name" = internal ] && continue
	[ -f "$dir/main.go" ] || continue
	names+=("$name")
done

pkgs=()
for name in "${names[@]}"; do pkgs+=("./examples/$name"); done
"$GO" build -o "$bin/" "${pkgs[@]}"

failed=()
for name in "${names[@]}"; do
	started="$(date +%s%N)"
	rc=0
	timeout --kill-after=5 "$limit" "$bin/$name" "$@" >"$bin/$name.out" 2>&1 || rc=$?
	took="$(( ($(date +%s%N) - started) / 1000000 ))"
	if [ "$rc" = 0 ]; then
		echo "examples: ok   $name (${took} ms)"
	else
		if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
			echo "examples: FAIL $name: still running after ${limit} s"
		else
			echo "examples: FAIL $name: exit status $rc"
		fi
		sed 's/^/    /' "$bin/$name.out"
		failed+=("$name")
	fi
done

if [ "${#failed[@]}" -gt 0 ]; then
	echo "examples: ${#failed[@]} of ${#names[@]} failed: ${failed[*]}" >&2
	exit 1
fi
echo "examples: all ${#names[@]} ran and exited 0"
