#!/usr/bin/env bash
# Installs the independent peers of the interop tests when they are missing:
# for AMQP 1.0, Qpid Proton for Python (Debian's python3-qpid-proton, run
# with /usr/bin/python3), rhea for Node.js (npm ci from package-lock.json
# into test/interop/node_modules) and fe2o3-amqp for Rust (cargo build
# --release --locked of test/interop/fe2o3, from its Cargo.lock, with the
# machine's Rust toolchain); for AMQP
# 0-9-1, pika (Debian's python3-pika, run with /usr/bin/python3). Meant for
# root on Debian 12 (make test runs it as root); it does nothing for what is
# already there.
#
# When a peer cannot be installed it says so loudly and exits 0, so that the
# interop tests skip with their own loud message; under REQUIRE_LIVE=1 (CI)
# it exits 1 instead, since those tests would fail anyway.
set -uo pipefail

dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export DEBIAN_FRONTEND=noninteractive

say() { echo "interop setup: $*" >&2; }

proton_ok() { /usr/bin/python3 -c 'import proton, proton.utils' >/dev/null 2>&1; }
pika_ok() { /usr/bin/python3 -c 'import pika' >/dev/null 2>&1; }
rhea_ok() { (cd "$dir" && node -e "require('rhea')") >/dev/null 2>&1; }
fe2o3_bin="$dir/fe2o3/target/release/fe2o3-peer"
fe2o3_ok() { "$fe2o3_bin" probe >/dev/null 2>&1; }

# apt_install installs Debian packages, refreshing the package lists only
# when the install fails without them (a fresh machine has none).
apt_install() {
	if [ "$(id -u)" != 0 ]; then
		say "not root: cannot apt-get install $*"
		return 1
	fi
	timeout 600 apt-get install -y -q "$@" && return 0
	say "apt-get install $* failed; running apt-get update and trying again"
	timeout 600 apt-get update -q && timeout 600 apt-get install -y -q "$@"
}

failed=()

if proton_ok; then
	say "Qpid Proton for Python: present"
else
	say "Qpid Proton for Python: installing python3-qpid-proton"
	apt_install python3-qpid-proton
	proton_ok || failed+=("Qpid Proton (python3-qpid-proton; check: /usr/bin/python3 -c 'import proton')")
fi

if pika_ok; then
	say "pika: present"
else
	say "pika: installing python3-pika"
	apt_install python3-pika
	pika_ok || failed+=("pika (python3-pika; check: /usr/bin/python3 -c 'import pika')")
fi

if rhea_ok; then
	say "rhea: present"
else
	if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
		say "no Node.js or npm on this machine: installing Debian's nodejs and npm"
		apt_install nodejs npm
	fi
	if command -v npm >/dev/null 2>&1 && { [ ! -d "$dir/node_modules" ] || ! rhea_ok; }; then
		say "rhea: npm ci in test/interop"
		(cd "$dir" && timeout 600 npm ci --ignore-scripts --no-audit --no-fund >&2)
	fi
	rhea_ok || failed+=("rhea (npm ci in test/interop; check: node -e \"require('rhea')\" there)")
fi

# rustup puts cargo in ~/.cargo/bin, which a non-login shell may not have on
# PATH. Debian 12's own cargo is too old for fe2o3-amqp (it needs Rust 1.85).
if ! command -v cargo >/dev/null 2>&1 && [ -x "${HOME:-/root}/.cargo/bin/cargo" ]; then
	PATH="${HOME:-/root}/.cargo/bin:$PATH"
fi
if command -v cargo >/dev/null 2>&1; then
	# Built every time, not only when missing, so that the binary follows
	# src/main.rs; cargo does nothing when it is up to date. A first build
	# fetches the crates and compiles them: minutes on a small machine.
	fe2o3_ok || say "fe2o3-amqp: building it (cargo build --release --locked in test/interop/fe2o3)"
	(cd "$dir/fe2o3" && timeout 1200 cargo build --release --locked -q >&2) || say "fe2o3-amqp: cargo build failed"
else
	say "no cargo on this machine (Rust 1.85 or later, e.g. from rustup): cannot build the fe2o3-amqp peer"
fi
if fe2o3_ok; then
	say "fe2o3-amqp: present"
else
	failed+=("fe2o3-amqp (cargo build --release --locked in test/interop/fe2o3; check: $fe2o3_bin probe)")
fi

if [ ${#failed[@]} -gt 0 ]; then
	for f in "${failed[@]}"; do
		say "COULD NOT INSTALL $f: the interop tests of that peer will SKIP (or fail under REQUIRE_LIVE=1)"
	done
	[ "${REQUIRE_LIVE:-}" = 1 ] && exit 1
	exit 0
fi
say "all peers ready (Qpid Proton, pika, rhea, fe2o3-amqp)"
