# make test: everything the project checks, on a fresh machine. As root it
# starts the RabbitMQ 4 test broker (test/broker/rabbitmq4.sh) and runs the
# live suites against it; without root or a broker they skip loudly, and
# under REQUIRE_LIVE=1 (CI) a skip is a failure. Last, as root, it starts a
# three-node RabbitMQ 4 cluster for the cluster tests alone and stops it
# after them (AMQP_CLUSTER_URLS names an existing one instead).
SHELL := /bin/bash
GO ?= go

.PHONY: test check broker-start broker-stop cluster-start cluster-stop examples bench

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
	if [ "$$(id -u)" = 0 ]; then bash test/interop/setup.sh; else echo "make test: not root, so the interop peers (Qpid Proton, rhea, pika) are not installed: where they are missing the interop tests will SKIP" >&2; fi; \
	bash test/browser/setup.sh; \
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v -E '/test/(faults|cluster)$$'); \
	$(GO) test -run '^$$' -timeout 5m -fuzz '^FuzzCheck$$' -fuzztime 1000000x ./internal/amqpscan; \
	$(GO) test -run '^$$' -timeout 5m -fuzz '^FuzzCheckGenerated$$' -fuzztime 500000x ./internal/amqpscan; \
	$(GO) test -run '^$$' -timeout 5m -fuzz '^FuzzGuard$$' -fuzztime 100000x ./transport/amqpwire; \
	$(GO) test -run '^$$' -timeout 5m -fuzz '^FuzzGuardHeader$$' -fuzztime 100000x ./transport/amqp091; \
	if [ -d test/faults ]; then \
		echo "make test: fault injection (cuts, broker restarts) runs alone, after the suites that share the broker" >&2; \
		$(GO) test -race -count=1 -p 1 ./test/faults/; \
	fi; \
	if [ -d test/cluster ]; then \
		if [ -n "$${AMQP_CLUSTER_URLS:-}" ]; then \
			$(GO) test -race -count=1 -p 1 -timeout 10m ./test/cluster/; \
		elif [ "$$(id -u)" = 0 ]; then \
			echo "make test: the cluster tests kill and restart nodes of a 3-node RabbitMQ 4 cluster started for them alone" >&2; \
			trap 'bash test/broker/rabbitmq4.sh cluster-stop' EXIT; \
			bash test/broker/rabbitmq4.sh cluster-start; \
			AMQP_CLUSTER_URLS="$$(bash test/broker/rabbitmq4.sh cluster-urls)" $(GO) test -race -count=1 -p 1 -timeout 10m ./test/cluster/; \
		else \
			echo "make test: not root, so no RabbitMQ 4 cluster: the cluster tests will SKIP (set AMQP_CLUSTER_URLS to use one)" >&2; \
			$(GO) test -race -count=1 -p 1 ./test/cluster/; \
		fi; \
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

cluster-start:
	bash test/broker/rabbitmq4.sh cluster-start

cluster-stop:
	bash test/broker/rabbitmq4.sh cluster-stop

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./test/bench/
