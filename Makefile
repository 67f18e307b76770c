# make test: everything the project checks, on a fresh machine. As root it
# starts the RabbitMQ 4.0 test broker (test/broker/rabbitmq4.sh) and a fresh
# ActiveMQ Artemis 2.40 (test/broker/artemis.sh, ARTEMIS_URL; the fault tests
# kill and restart an Artemis of their own on ARTEMIS_FAULTS_PORT) and runs the
# live suites against them; without root or a broker they skip loudly, and
# under REQUIRE_LIVE=1 (CI) a skip is a failure. Then it runs the live
# suites and fault injection a second time on RabbitMQ 4.3, the current
# release line, which it starts beside 4.0 (AMQPACTOR_RABBIT_VERSION=4.3;
# AMQP_URL_43 names an existing one instead). Last, as root, it starts a
# three-node RabbitMQ 4.0 cluster for the cluster tests and the cluster soak
# (node kills) alone and stops it after them (AMQP_CLUSTER_URLS names an
# existing one instead). The first pass leaves the script to pick the node
# from AMQP_URL (4.0 unless it names the 4.3 node), so that its rabbitmqctl
# calls reach the broker under test.
SHELL := /bin/bash
GO ?= go

# The tests, test/ and its kit build with go_test.mod: go.mod's requirements
# and what only they use. go.mod is the library's alone (tools/librarymod.sh
# checks it), so every go command here that builds test code takes TESTMOD.
TESTMOD = -modfile=go_test.mod

# The live packages: those whose tests read AMQP_URL. Fault injection and
# the cluster tests run on their own, after them.
LIVE_PKGS = $(shell grep -rlE --include='*_test.go' 'AMQP_URL|livetest\.URL|livetest\.ArtemisURL' . | grep -v '/node_modules/' | xargs -n1 dirname | sort -u | grep -v -E '^\./test/(faults|cluster)$$')

.PHONY: test test-live43 check broker-start broker-stop broker43-start broker43-stop cluster-start cluster-stop examples bench

# The fuzz targets run for a count of inputs, not a time: go1.26's fuzzing
# coordinator can fail a run at the end of -fuzztime with a bare "context
# deadline exceeded" (golang/go#75804).
test: check
	@set -euo pipefail; \
	unset AMQPACTOR_RABBIT_VERSION; \
	if [ -z "$${AMQP_URL:-}" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			bash test/broker/rabbitmq4.sh start; \
			bash test/broker/rabbitmq4.sh reset; \
			export AMQP_URL="$$(bash test/broker/rabbitmq4.sh url)"; \
		else \
			echo "make test: not root, so no RabbitMQ 4 test broker: the live suites will SKIP (set AMQP_URL to use one)" >&2; \
		fi; \
	fi; \
	if [ -z "$${ARTEMIS_URL:-}" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			bash test/broker/artemis.sh reset; \
			export ARTEMIS_URL="$$(bash test/broker/artemis.sh url)"; \
		else \
			echo "make test: not root, so no Artemis test broker: the Artemis suites will SKIP (set ARTEMIS_URL to use one)" >&2; \
		fi; \
	fi; \
	bash test/asyncapi/setup.sh; \
	bash examples/run-all.sh; \
	if [ -n "$${ARTEMIS_URL:-}" ]; then \
		echo "make test: the examples on Artemis" >&2; \
		bash examples/run-all.sh -url "$$ARTEMIS_URL" -dialect artemis; \
	fi; \
	if [ "$$(id -u)" = 0 ]; then bash test/interop/setup.sh; else echo "make test: not root, so the interop peers (Qpid Proton, rhea, pika, fe2o3-amqp) are not installed: where they are missing the interop tests will SKIP" >&2; fi; \
	bash test/browser/setup.sh; \
	$(GO) test $(TESTMOD) -race -count=1 $$($(GO) list $(TESTMOD) ./... | grep -v -E '/test/(faults|cluster)$$'); \
	$(GO) test $(TESTMOD) -run '^$$' -timeout 5m -fuzz '^FuzzCheck$$' -fuzztime 1000000x ./internal/amqpscan; \
	$(GO) test $(TESTMOD) -run '^$$' -timeout 5m -fuzz '^FuzzCheckGenerated$$' -fuzztime 500000x ./internal/amqpscan; \
	$(GO) test $(TESTMOD) -run '^$$' -timeout 5m -fuzz '^FuzzGuard$$' -fuzztime 100000x ./transport/amqpwire; \
	$(GO) test $(TESTMOD) -run '^$$' -timeout 5m -fuzz '^FuzzGuardHeader$$' -fuzztime 100000x ./transport/amqp091; \
	$(GO) test $(TESTMOD) -run '^$$' -timeout 5m -fuzz '^FuzzParse$$' -fuzztime 100000x ./internal/sqlfilter; \
	if [ -d test/faults ]; then \
		echo "make test: fault injection (cuts, broker restarts) runs alone, after the suites that share the broker" >&2; \
		ARTEMIS_FAULTS_PORT="$${ARTEMIS_FAULTS_PORT:-5683}" $(GO) test $(TESTMOD) -race -count=1 -p 1 ./test/faults/; \
		if [ "$$(id -u)" = 0 ]; then AMQPACTOR_ARTEMIS_PORT="$${ARTEMIS_FAULTS_PORT:-5683}" bash test/broker/artemis.sh stop; fi; \
	fi; \
	if [ -n "$${AMQP_URL:-}" ]; then \
		echo "make test: the soak: $${SOAK_FOR:-3m} of traffic through a fault proxy, with broker restarts as root" >&2; \
		$(GO) run $(TESTMOD) -race ./test/soak -for "$${SOAK_FOR:-3m}" -sample 1m; \
	elif [ "$${REQUIRE_LIVE:-}" = 1 ]; then \
		echo "make test: REQUIRE_LIVE=1 but no AMQP_URL for the soak" >&2; exit 1; \
	else \
		echo "make test: no AMQP_URL, so no soak: it SKIPS" >&2; \
	fi; \
	$(MAKE) --no-print-directory test-live43; \
	if [ -d test/cluster ]; then \
		if [ -n "$${AMQP_CLUSTER_URLS:-}" ]; then \
			$(GO) test $(TESTMOD) -race -count=1 -p 1 -timeout 10m ./test/cluster/; \
			echo "make test: the cluster soak: $${CLUSTER_SOAK_FOR:-2m} through a fault proxy a node, with node kills as root" >&2; \
			$(GO) run $(TESTMOD) -race ./test/soak -for "$${CLUSTER_SOAK_FOR:-2m}" -sample 1m; \
		elif [ "$$(id -u)" = 0 ]; then \
			echo "make test: the cluster tests and the cluster soak kill and restart nodes of a 3-node RabbitMQ 4 cluster started for them alone" >&2; \
			trap 'bash test/broker/rabbitmq4.sh cluster-stop' EXIT; \
			bash test/broker/rabbitmq4.sh cluster-start; \
			export AMQP_CLUSTER_URLS="$$(bash test/broker/rabbitmq4.sh cluster-urls)"; \
			$(GO) test $(TESTMOD) -race -count=1 -p 1 -timeout 10m ./test/cluster/; \
			echo "make test: the cluster soak: $${CLUSTER_SOAK_FOR:-2m} through a fault proxy a node, with node kills" >&2; \
			$(GO) run $(TESTMOD) -race ./test/soak -for "$${CLUSTER_SOAK_FOR:-2m}" -sample 1m; \
		else \
			echo "make test: not root, so no RabbitMQ 4 cluster: the cluster tests will SKIP (set AMQP_CLUSTER_URLS to use one)" >&2; \
			$(GO) test $(TESTMOD) -race -count=1 -p 1 ./test/cluster/; \
		fi; \
	fi

# test-live43: the live suites, interop and fault injection on RabbitMQ 4.3
# (make test runs it after the 4.0 pass). The fault tests restart the node
# through test/broker/rabbitmq4.sh, so AMQPACTOR_RABBIT_VERSION=4.3 goes
# with AMQP_URL; they refuse to restart a node other than the one it names.
test-live43:
	@set -euo pipefail; \
	u="$${AMQP_URL_43:-}"; \
	if [ -z "$$u" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			AMQPACTOR_RABBIT_VERSION=4.3 bash test/broker/rabbitmq4.sh start; \
			AMQPACTOR_RABBIT_VERSION=4.3 bash test/broker/rabbitmq4.sh reset; \
			u="$$(AMQPACTOR_RABBIT_VERSION=4.3 bash test/broker/rabbitmq4.sh url)"; \
		elif [ "$${REQUIRE_LIVE:-}" = 1 ]; then \
			echo "make test: REQUIRE_LIVE=1 but not root, so no RabbitMQ 4.3 test broker (set AMQP_URL_43 to use one)" >&2; exit 1; \
		else \
			echo "make test: not root, so no RabbitMQ 4.3 test broker: the second live pass is SKIPPED (set AMQP_URL_43 to use one)" >&2; exit 0; \
		fi; \
	fi; \
	echo "make test: the live suites again, on RabbitMQ 4.3 (the Artemis subtests ran in the first pass)" >&2; \
	export AMQP_URL="$$u" AMQPACTOR_RABBIT_VERSION=4.3; \
	$(GO) test $(TESTMOD) -race -count=1 -skip '/artemis' $(filter-out ./test/artemis,$(LIVE_PKGS)); \
	if [ -d test/faults ]; then \
		echo "make test: fault injection on RabbitMQ 4.3" >&2; \
		$(GO) test $(TESTMOD) -race -count=1 -p 1 -timeout 25m -skip '/artemis' ./test/faults/; \
	fi

check:
	@bad="$$(gofmt -l . | grep -v '/node_modules/' || true)"; \
	if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi
	$(GO) vet $(TESTMOD) ./...
	$(GO) mod tidy $(TESTMOD) -diff
	$(GO) build $(TESTMOD) ./...
	GO=$(GO) bash tools/librarymod.sh
	cd tools/docrefs && $(GO) vet ./... && $(GO) mod tidy -diff && $(GO) test -count=1 ./... && $(GO) run . -root ../..
	cd test/bench/critpath && $(GO) vet ./... && $(GO) mod tidy -diff && $(GO) test -race -count=1 ./...

broker-start:
	bash test/broker/rabbitmq4.sh start

broker-stop:
	bash test/broker/rabbitmq4.sh stop

broker43-start:
	AMQPACTOR_RABBIT_VERSION=4.3 bash test/broker/rabbitmq4.sh start

broker43-stop:
	AMQPACTOR_RABBIT_VERSION=4.3 bash test/broker/rabbitmq4.sh stop

cluster-start:
	bash test/broker/rabbitmq4.sh cluster-start

cluster-stop:
	bash test/broker/rabbitmq4.sh cluster-stop

bench:
	$(GO) test $(TESTMOD) -run '^$$' -bench . -benchmem ./test/bench/
