#!/usr/bin/env bash
# artemis.sh — the ActiveMQ Artemis test broker for amqpactor's live suites.
#
# Artemis 2.40.0 is the broker DESIGN.md's address model comes from. Its
# distribution is fetched once with Maven (org.apache.activemq:apache-artemis,
# classifier bin, type tar.gz) and unpacked beside the RabbitMQ chroots; each
# `start` makes a throwaway instance on its own ports (AMQP on 5682 unless
# AMQPACTOR_ARTEMIS_PORT says otherwise) and runs it with Java 17. Nothing but
# the defaults of `artemis create` is changed: no web console, NIO journal
# without fsync (a test broker), login required.
#
# Usage:
#   artemis.sh start     fetch (once), create an instance and start it; reuse one that answers
#   artemis.sh stop      stop the broker, but only if this script started it, and remove the instance
#   artemis.sh url       print the AMQP URL of the broker (artemis/artemis on loopback)
#   artemis.sh status    say whether the broker answers and who started it
#   artemis.sh reset     stop the instance this script started, remove it, start a fresh one
#   artemis.sh kill9     crash the broker (kill -9 its JVM); `start` brings it back with its data
#   artemis.sh version   print the Artemis version this script runs
#
# Environment:
#   AMQPACTOR_ARTEMIS_DIR   where the distribution and the instance live
#                           (default /var/lib/amqpactor/artemis)
#   AMQPACTOR_ARTEMIS_PORT  AMQP port on 127.0.0.1 (default 5682)
#
# Needs Java 17 and Maven (for the first fetch). Progress goes to stderr; only
# `url` and `version` write to stdout.
set -euo pipefail

VERSION=2.40.0
DIR=${AMQPACTOR_ARTEMIS_DIR:-/var/lib/amqpactor/artemis}
PORT=${AMQPACTOR_ARTEMIS_PORT:-5682}
# The core acceptor sits at 61616 + offset; the offset moves both.
OFFSET=$((PORT - 5672))
HOME_DIR="$DIR/apache-artemis-$VERSION"
INSTANCE="$DIR/instance-$PORT"
MARKER="$INSTANCE/amqpactor-started"
PIDFILE="$INSTANCE/amqpactor.pid"
USER_NAME=artemis
PASSWORD=artemis

# Bounds on every wait, in seconds.
FETCH_TIMEOUT=600
STARTUP_TIMEOUT=120
STOP_TIMEOUT=60

log() { printf 'artemis.sh: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# answers: true when something accepts TCP connections on the AMQP port.
answers() {
	timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT" 2>/dev/null
}

ensure_java() {
	command -v java >/dev/null 2>&1 || die "java is missing: Artemis $VERSION needs Java 17"
	local v
	v=$(java -version 2>&1 | awk -F'"' '/version/ { print $2; exit }')
	case "$v" in
	1.* | 9* | 10* | 11* | 12* | 13* | 14* | 15* | 16*) die "java $v is too old: Artemis $VERSION needs Java 17" ;;
	esac
}

ensure_installed() {
	if [ -x "$HOME_DIR/bin/artemis" ]; then
		return 0
	fi
	mkdir -p "$DIR"
	local tarball="$DIR/apache-artemis-$VERSION-bin.tar.gz"
	if [ ! -s "$tarball" ]; then
		command -v mvn >/dev/null 2>&1 || die "mvn is missing: it fetches the Artemis distribution from Maven Central"
		log "fetching org.apache.activemq:apache-artemis:$VERSION:tar.gz:bin with Maven"
		timeout "$FETCH_TIMEOUT" mvn -q -B dependency:copy \
			-Dartifact="org.apache.activemq:apache-artemis:$VERSION:tar.gz:bin" \
			-DoutputDirectory="$DIR" >&2 || die "mvn could not fetch the Artemis distribution"
	fi
	log "unpacking $tarball"
	tar -xzf "$tarball" -C "$DIR" || die "could not unpack $tarball"
	[ -x "$HOME_DIR/bin/artemis" ] || die "$HOME_DIR/bin/artemis is missing after unpacking"
}

pid() {
	[ -s "$PIDFILE" ] && cat "$PIDFILE"
}

running() {
	local p
	p=$(pid) || return 1
	kill -0 "$p" 2>/dev/null
}

create_instance() {
	log "creating an instance in $INSTANCE (AMQP port $PORT)"
	# --host names the acceptors' bind address: loopback only.
	"$HOME_DIR/bin/artemis" create --silent --force --no-web --no-autotune --nio --no-fsync \
		--java-memory 1G --port-offset "$OFFSET" --host 127.0.0.1 \
		--no-hornetq-acceptor --no-mqtt-acceptor --no-stomp-acceptor \
		--require-login --user "$USER_NAME" --password "$PASSWORD" \
		"$INSTANCE" >"$DIR/create-$PORT.log" 2>&1 || {
		cat "$DIR/create-$PORT.log" >&2
		die "artemis create failed"
	}
}

cmd_start() {
	ensure_java
	if answers; then
		if running; then
			log "the instance this script started answers on port $PORT"
		else
			log "something already answers on port $PORT: reusing it (not started by this script)"
		fi
		return 0
	fi
	ensure_installed
	[ -x "$INSTANCE/bin/artemis" ] || create_instance
	log "starting Artemis $VERSION on port $PORT"
	: >"$INSTANCE/amqpactor-run.log"
	setsid nohup "$INSTANCE/bin/artemis" run >>"$INSTANCE/amqpactor-run.log" 2>&1 </dev/null &
	echo $! >"$PIDFILE"
	touch "$MARKER"
	local waited=0
	until answers && grep -q 'AMQ221007: Server is now active' "$INSTANCE/amqpactor-run.log"; do
		if ! running; then
			tail -n 40 "$INSTANCE/amqpactor-run.log" >&2 || true
			die "Artemis exited during startup"
		fi
		if [ "$waited" -ge $((STARTUP_TIMEOUT * 2)) ]; then
			tail -n 40 "$INSTANCE/amqpactor-run.log" >&2 || true
			die "Artemis did not answer on port $PORT within $STARTUP_TIMEOUT s"
		fi
		sleep 0.5
		waited=$((waited + 1))
	done
	log "Artemis $VERSION answers on port $PORT"
}

# halt SIGNAL: stop the JVM this script started and wait for it (bounded).
halt() {
	local p
	p=$(pid) || return 0
	if kill -0 "$p" 2>/dev/null; then
		# `artemis run` execs java in the same process group (setsid above).
		kill "-$1" -- "-$p" 2>/dev/null || kill "-$1" "$p" 2>/dev/null || true
		local waited=0
		while kill -0 "$p" 2>/dev/null; do
			if [ "$waited" -ge $((STOP_TIMEOUT * 2)) ]; then
				log "Artemis did not stop within $STOP_TIMEOUT s: killing it"
				kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true
				break
			fi
			sleep 0.5
			waited=$((waited + 1))
		done
	fi
	rm -f "$PIDFILE"
}

cmd_stop() {
	if [ ! -e "$MARKER" ]; then
		log "no instance of this script's on port $PORT: nothing to stop"
		return 0
	fi
	halt TERM
	rm -rf "$INSTANCE"
	log "stopped, and removed the instance"
}

cmd_reset() {
	if [ ! -e "$MARKER" ]; then
		if answers; then
			die "the broker on port $PORT was not started by this script: not resetting it"
		fi
	fi
	halt TERM
	rm -rf "$INSTANCE"
	cmd_start
}

cmd_kill9() {
	[ -e "$MARKER" ] || die "the broker on port $PORT was not started by this script: not killing it"
	halt KILL
	log "killed; \`start\` brings it back with its data"
}

cmd_status() {
	if answers; then
		if running; then
			log "answers on port $PORT (started by this script, pid $(pid))"
		else
			log "answers on port $PORT (not started by this script)"
		fi
	else
		log "nothing answers on port $PORT"
		return 1
	fi
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
url) echo "amqp://$USER_NAME:$PASSWORD@127.0.0.1:$PORT/" ;;
status) cmd_status ;;
reset) cmd_reset ;;
kill9) cmd_kill9 ;;
version) echo "$VERSION" ;;
*)
	log "usage: artemis.sh start|stop|url|status|reset|kill9|version"
	exit 2
	;;
esac
