# make test: everything the project checks, on a fresh machine. As root it
# starts the RabbitMQ 4 test broker (test/broker/rabbitmq4.sh) and runs the
# live suites against it; without root or a broker they skip loudly, and
# under REQUIRE_LIVE=1 (CI) a skip is a failure.
SHELL := /bin/bash
GO ?= go

.PHONY: test check broker-start broker-stop examples bench

# The fuzz targets run for a count of inputs, not a time: go1.26's fuzzing
# coordinator can fail a run at the end of -fuzztime with a bare "context
# deadline exceeded" (golang/go#75804).
test: check
	@set -euo pipefail; \
	if [ -z "$${AMQP_URL:-}" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			bash test/broker/rabbitmq4.sh start; \
			bash test/broker/rabbitmq4.sh reset; \
			export AMQP_URL="$$(bash test/broker/rabbitmq4.sh url)"; \
		else \
			echo "make test: not root, so no RabbitMQ 4 test broker: the live suites will SKIP (set AMQP_URL to use one)" >&2; \
		fi; \
	fi; \
	bash test/asyncapi/setup.sh; \
	bash examples/run-all.sh; \
	if [ "$$(id -u)" = 0 ]; then bash test/interop/setup.sh; else echo "make test: not root, so the interop peers (Qpid Proton, rhea) are not installed: where they are missing the interop tests will SKIP" >&2; fi; \
	bash test/browser/setup.sh; \
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v '/test/faults$$'); \
	$(GO) test -run '^$$' -timeout 5m -fuzz '^FuzzCheck$$' -fuzztime 1000000x ./internal/amqpscan; \
	$(GO) test -run '^$$' -timeout 5m -fuzz '^FuzzCheckGenerated$$' -fuzztime 500000x ./internal/amqpscan; \
	$(GO) test -run '^$$' -timeout 5m -fuzz '^FuzzGuard$$' -fuzztime 100000x ./transport/amqpwire; \
	if [ -d test/faults ]; then \
		echo "make test: fault injection (cuts, broker restarts) runs alone, after the suites that share the broker" >&2; \
		$(GO) test -race -count=1 -p 1 ./test/faults/; \
	fi

check:
	@bad="$$(gofmt -l . | grep -v '/node_modules/' || true)"; \
	if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...
	$(GO) build ./...

broker-start:
	bash test/broker/rabbitmq4.sh start

broker-stop:
	bash test/broker/rabbitmq4.sh stop

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./test/bench/
