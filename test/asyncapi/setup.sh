#!/usr/bin/env bash
# Installs the official AsyncAPI parser (npm @asyncapi/parser, pinned by
# package-lock.json) into test/asyncapi/node_modules when it is missing, for
# asyncapi_test.go. Bounded in time. Without npm, or when the install fails,
# it warns and the tests skip loudly; under REQUIRE_LIVE=1 (CI) it fails.
set -euo pipefail
cd "$(dirname "$0")"

if [ -f node_modules/@asyncapi/parser/package.json ]; then
	exit 0
fi

fail() {
	echo "test/asyncapi/setup.sh: $*" >&2
	if [ "${REQUIRE_LIVE:-}" = 1 ]; then
		exit 1
	fi
	echo "test/asyncapi/setup.sh: the AsyncAPI parser tests will SKIP" >&2
	exit 0
}

command -v npm >/dev/null 2>&1 || fail "npm is not installed (Debian: apt-get install npm)"
echo "test/asyncapi/setup.sh: installing @asyncapi/parser (npm ci)" >&2
# --ignore-scripts: the parser needs no install script, and none should run.
timeout "${ASYNCAPI_SETUP_TIMEOUT:-300}" npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2 ||
	fail "npm ci failed or timed out"
[ -f node_modules/@asyncapi/parser/package.json ] || fail "npm ci left no @asyncapi/parser"
