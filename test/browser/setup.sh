#!/usr/bin/env bash
# Installs headless Chromium (Debian's chromium package) for the browser
# tests of the debug page (test/browser), when it is missing. Meant for root
# on Debian (make test runs it); it does nothing when a Chromium is there.
#
# When Chromium cannot be installed it says so loudly and exits 0, so that
# the browser tests skip with their own loud message; under REQUIRE_LIVE=1
# (CI) it exits 1 instead, since those tests would fail anyway.
set -uo pipefail
export DEBIAN_FRONTEND=noninteractive

say() { echo "browser setup: $*" >&2; }

have() { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || [ -n "${CHROMIUM:-}" ]; }

if have; then
	say "Chromium: present"
	exit 0
fi

fail() {
	say "COULD NOT INSTALL Chromium: $* (Debian: apt-get install chromium); the browser tests will SKIP (or fail under REQUIRE_LIVE=1)"
	if [ "${REQUIRE_LIVE:-}" = 1 ]; then
		exit 1
	fi
	exit 0
}

[ "$(id -u)" = 0 ] || fail "not root, so apt-get cannot run"
command -v apt-get >/dev/null 2>&1 || fail "no apt-get on this machine"
say "Chromium: installing Debian's chromium"
# A fresh machine has no package lists: refresh them only when the install
# fails without them.
if ! timeout 900 apt-get install -y -q chromium >&2; then
	say "apt-get install chromium failed; running apt-get update and trying again"
	timeout 600 apt-get update -q >&2 && timeout 900 apt-get install -y -q chromium >&2 || fail "apt-get install chromium failed or timed out"
fi
have || fail "apt-get installed no chromium"
say "Chromium: $(chromium --version 2>/dev/null | head -1)"
