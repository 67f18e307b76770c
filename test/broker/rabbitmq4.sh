#!/usr/bin/env bash
# rabbitmq4.sh — the RabbitMQ 4 test brokers for amqpactor's live suites.
#
# RabbitMQ 4 speaks AMQP 1.0 natively. Two versions are targets, each in a
# chroot of its own so that it works on older hosts (Debian 12 ships 3.10,
# which is not a target) and so that both run side by side:
#   4.0 (default)  RabbitMQ 4.0.5 from Debian 13 (trixie), node rabbit4@localhost, port 5673
#   4.3            RabbitMQ 4.3.x from Debian sid, node rabbit43@localhost, port 5674
# AMQPACTOR_RABBIT_VERSION picks the one every command below acts on; unset,
# it is 4.3 when AMQP_URL names the 4.3 node's loopback port, 4.0 otherwise.
# Nothing but the defaults is enabled.
#
# Usage:
#   rabbitmq4.sh start       install (once) and start the broker; reuse one that already answers
#   rabbitmq4.sh stop        stop the broker, but only if this script started it
#   rabbitmq4.sh url         print the AMQP URL of the broker (guest/guest on loopback)
#   rabbitmq4.sh status      say whether the broker answers and who started it
#   rabbitmq4.sh version     print the selected version (4.0 or 4.3)
#   rabbitmq4.sh ctl ARGS..  run rabbitmqctl against the selected node (rabbit4@localhost
#                            or rabbit43@localhost) inside its chroot
#   rabbitmq4.sh oauth2 on KID JWK
#                            let the running node also take OAuth 2 tokens (JWTs) as the
#                            PLAIN password: enable rabbitmq_auth_backend_oauth2, try it after
#                            the internal backend (internal users keep working), resource server
#                            id "amqpactor" (scopes amqpactor.configure:*/* …), and add the
#                            signing key JWK (JSON) as KID; no restart
#   rabbitmq4.sh oauth2 off  the internal backend alone again
#   rabbitmq4.sh reset       wipe the broker this script started to an empty node
#   rabbitmq4.sh kill9       crash the broker: kill -9 its Erlang VM (and the chroot's epmd);
#                            `start` brings it back (fault-injection tests)
#
# Cluster mode: three clustered nodes in the same chroot, beside the single
# node and independent of it (own node names rabbitcN@localhost, AMQP ports
# AMQPACTOR_CLUSTER_PORT+0..2, distribution and epmd ports, configuration
# and data directories under /var/lib/rabbitmq/cluster):
#   rabbitmq4.sh cluster-start      start three fresh nodes and cluster them; reuse a cluster that answers
#   rabbitmq4.sh cluster-stop       stop the cluster this script started and wipe its data
#   rabbitmq4.sh cluster-kill N     crash node N (1..3): kill -9 its Erlang VM
#   rabbitmq4.sh cluster-restart N  start node N again with its data (it rejoins the cluster)
#   rabbitmq4.sh cluster-urls       print the three AMQP URLs, space separated
#   rabbitmq4.sh cluster-ctl N ARGS.. run rabbitmqctl against node N
#
# Environment:
#   AMQPACTOR_RABBIT_VERSION 4.0 or 4.3 (default: from AMQP_URL's port, else 4.0)
#   AMQPACTOR_RABBIT_DIR   chroot directory (default /var/lib/amqpactor/rabbitmq4-chroot,
#                          /var/lib/amqpactor/rabbitmq43-chroot for 4.3)
#   AMQPACTOR_RABBIT_PORT  AMQP port on 127.0.0.1 and ::1 (default 5673, 5674 for 4.3)
#   AMQPACTOR_CLUSTER_PORT AMQP port of cluster node 1; nodes 2 and 3 take the next two
#                          (default 5691, 5701 for 4.3)
#
# Needs root (chroot, mount). Progress goes to stderr; only `url`, `version`, `ctl`,
# `cluster-urls` and `cluster-ctl` write to stdout.
set -euo pipefail

# Each version has a chroot, node name and ports of its own, so the two
# nodes run side by side and a stop, reset or kill9 of one never meets the
# other (processes are told apart by their root directory).
VERSION=${AMQPACTOR_RABBIT_VERSION:-}
if [ -z "$VERSION" ]; then
	# A test run pointed at the 4.3 node by AMQP_URL alone must not have
	# its rabbitmqctl calls (or restarts) land on the 4.0 node.
	if [[ ${AMQP_URL:-} =~ @(127\.0\.0\.1|localhost|\[::1\]):5674(/|$) ]]; then
		VERSION=4.3
	else
		VERSION=4.0
	fi
fi
case "$VERSION" in
4.0 | 4)
	VERSION=4.0
	DEFAULT_DIR=/var/lib/amqpactor/rabbitmq4-chroot DEFAULT_PORT=5673 NODE=rabbit4@localhost SUITE=trixie
	DIST_BASE=25673 EPMD_BASE=14369 DEFAULT_CLUSTER_PORT=5691 CLUSTER_DIST_BASE=25691 CLUSTER_EPMD_BASE=14469
	;;
4.3)
	DEFAULT_DIR=/var/lib/amqpactor/rabbitmq43-chroot DEFAULT_PORT=5674 NODE=rabbit43@localhost SUITE=sid
	DIST_BASE=25674 EPMD_BASE=14370 DEFAULT_CLUSTER_PORT=5701 CLUSTER_DIST_BASE=25701 CLUSTER_EPMD_BASE=14479
	;;
*)
	printf 'rabbitmq4.sh: error: AMQPACTOR_RABBIT_VERSION=%s is not a target; want 4.0 or 4.3\n' "$VERSION" >&2
	exit 2
	;;
esac
DIR=${AMQPACTOR_RABBIT_DIR:-$DEFAULT_DIR}
PORT=${AMQPACTOR_RABBIT_PORT:-$DEFAULT_PORT}
MARKER="$DIR/var/lib/rabbitmq/amqpactor-started"

# Bounds on every wait, in seconds.
APT_TIMEOUT=600
DEBOOTSTRAP_TIMEOUT=1200
STARTUP_TIMEOUT=120
CLUSTER_PORT=${AMQPACTOR_CLUSTER_PORT:-$DEFAULT_CLUSTER_PORT}
CLUSTER_BASE=/var/lib/rabbitmq/cluster
CLUSTER_MARKER="$DIR$CLUSTER_BASE/amqpactor-started"
STOP_TIMEOUT=60
CTL_TIMEOUT=60

log() { printf 'rabbitmq4.sh: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

need_root() {
	[ "$(id -u)" -eq 0 ] || die "must run as root (chroot and mount need it)"
}

# answers HOST PORT: true when something accepts TCP connections there.
answers() {
	timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null
}

# free_port FROM: print the first port >= FROM that nothing listens on.
free_port() {
	local p=$1
	while [ "$p" -lt $(($1 + 200)) ]; do
		if ! answers 127.0.0.1 "$p" && ! port_listed "$p"; then
			echo "$p"
			return 0
		fi
		p=$((p + 1))
	done
	die "no free port in $1..$(($1 + 199))"
}

# port_listed PORT: true when ss lists a listener on PORT (any address).
port_listed() {
	command -v ss >/dev/null 2>&1 || return 1
	ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
}

installed() {
	[ -x "$DIR/usr/lib/rabbitmq/bin/rabbitmq-server" ] &&
		chroot "$DIR" dpkg-query -W -f='${Status}' rabbitmq-server 2>/dev/null | grep -q 'install ok installed'
}

installed_version() {
	chroot "$DIR" dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null || echo unknown
}

ensure_debootstrap() {
	command -v debootstrap >/dev/null 2>&1 && return 0
	command -v apt-get >/dev/null 2>&1 || die "debootstrap is missing and there is no apt-get to install it"
	log "installing debootstrap"
	export DEBIAN_FRONTEND=noninteractive
	if ! timeout "$APT_TIMEOUT" apt-get install -y -q debootstrap >&2; then
		log "apt-get install failed; running apt-get update first"
		timeout "$APT_TIMEOUT" apt-get update -q >&2
		timeout "$APT_TIMEOUT" apt-get install -y -q debootstrap >&2
	fi
	command -v debootstrap >/dev/null 2>&1 || die "debootstrap still missing after apt-get install"
}

ensure_installed() {
	if installed; then
		log "reusing the chroot in $DIR"
		return 0
	fi
	ensure_debootstrap
	log "installing Debian $SUITE with rabbitmq-server into $DIR (about 40 s and 400 MB)"
	mkdir -p "$DIR"
	if ! timeout "$DEBOOTSTRAP_TIMEOUT" debootstrap --variant=minbase --include=rabbitmq-server "$SUITE" "$DIR" >&2; then
		die "debootstrap failed; see $DIR/debootstrap/debootstrap.log (remove $DIR to start over)"
	fi
	installed || die "rabbitmq-server is not installed in $DIR after debootstrap"
}

proc_mounted() {
	# /proc/self/mounts lists mount points with spaces escaped; DIR has none in practice.
	awk -v m="$DIR/proc" '$2 == m { found = 1 } END { exit !found }' /proc/self/mounts
}

ensure_proc() {
	if proc_mounted; then
		return 0
	fi
	log "mounting proc in $DIR/proc"
	mount -t proc proc "$DIR/proc"
}

ensure_hosts() {
	# The node is rabbit4@localhost (rabbit43@localhost): the chroot must resolve localhost itself.
	local hosts="$DIR/etc/hosts"
	if ! grep -Eq '^[[:space:]]*127\.0\.0\.1[[:space:]]+(.*[[:space:]])?localhost([[:space:]]|$)' "$hosts" 2>/dev/null; then
		log "adding localhost to $hosts"
		printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >>"$hosts"
	fi
}

write_config() {
	local dist_port=$1 epmd_port=$2
	mkdir -p "$DIR/etc/rabbitmq"
	cat >"$DIR/etc/rabbitmq/rabbitmq.conf" <<-EOF
		# Written by amqpactor's test/broker/rabbitmq4.sh; rewritten on every start.
		listeners.tcp.default = $PORT
		loopback_users = none
	EOF
	# ERL_EPMD_PORT gives the chroot its own epmd, so it never meets (or
	# registers with, or is killed along with) an epmd of the host.
	cat >"$DIR/etc/rabbitmq/rabbitmq-env.conf" <<-EOF
		# Written by amqpactor's test/broker/rabbitmq4.sh; rewritten on every start.
		NODENAME=$NODE
		DIST_PORT=$dist_port
		ERL_EPMD_PORT=$epmd_port
		# Each classic queue with messages keeps a file open: at su's soft
		# limit of 1,024 the node runs out after ~1,000 queues and then
		# refuses every login until it restarts. The file is sourced by sh.
		ulimit -S -n "\$(ulimit -H -n)" 2>/dev/null || true
	EOF
}

ctl() {
	timeout "$CTL_TIMEOUT" chroot "$DIR" env HOME=/var/lib/rabbitmq rabbitmqctl -n "$NODE" "$@"
}

# chroot_pids NAME [CLUSTER]: pids of processes called NAME whose root is
# the chroot. Without CLUSTER only those of the single node; with it only
# those of the cluster (CLUSTER=any) or of cluster node CLUSTER: cluster
# processes carry AMQPACTOR_CLUSTER_NODE in their environment, so the
# single node's stop and kill9 never touch them, nor the reverse.
chroot_pids() {
	local want p root comm tag
	want=$(readlink -f "$DIR")
	for p in /proc/[0-9]*; do
		comm=
		read -r comm 2>/dev/null <"$p/comm" || continue
		[ "$comm" = "$1" ] || continue
		root=$(readlink "$p/root" 2>/dev/null || true)
		[ "$root" = "$want" ] || continue
		tag=$(tr '\0' '\n' 2>/dev/null <"$p/environ" | sed -n 's/^AMQPACTOR_CLUSTER_NODE=//p' || true)
		case "${2:-}" in
		'') [ -z "$tag" ] || continue ;;
		any) [ -n "$tag" ] || continue ;;
		*) [ "$tag" = "$2" ] || continue ;;
		esac
		echo "${p#/proc/}"
	done
	return 0
}

beam_pid() {
	# The Erlang VM is called beam.smp on multi-core machines, beam on others.
	{ chroot_pids beam.smp; chroot_pids beam; } | head -n1
}

cmd_start() {
	need_root
	if answers 127.0.0.1 "$PORT"; then
		if [ -f "$MARKER" ]; then
			log "a broker started by this script already answers on 127.0.0.1:$PORT; reusing it"
		else
			log "something already answers on 127.0.0.1:$PORT (not started by this script); reusing it"
		fi
		return 0
	fi
	ensure_installed
	ensure_hosts
	ensure_proc
	if [ -n "$(beam_pid)" ]; then
		# Perhaps still starting (or recovering after a crash): give it a
		# minute before calling it stuck.
		log "an Erlang VM already runs in $DIR; waiting for it to answer on port $PORT"
		local i
		for i in $(seq 1 300); do
			answers 127.0.0.1 "$PORT" && {
				log "it answers now; reusing it"
				return 0
			}
			[ -z "$(beam_pid)" ] && break
			sleep 0.2
		done
		if [ -n "$(beam_pid)" ]; then
			[ -f "$MARKER" ] || die "an Erlang VM not started by this script runs in $DIR but nothing answers on port $PORT; stop it first ($0 ctl stop)"
			log "the VM this script started does not answer; stopping it and starting afresh"
			cmd_stop
			ensure_proc
		fi
	fi

	local dist_port epmd_port
	dist_port=$(free_port "$DIST_BASE")
	epmd_port=$(free_port "$EPMD_BASE")
	[ "$dist_port" != "$epmd_port" ] || die "port search returned the same port twice"
	write_config "$dist_port" "$epmd_port"
	rm -f "$MARKER"

	log "starting RabbitMQ (node $NODE, AMQP port $PORT, distribution port $dist_port, epmd port $epmd_port)"
	timeout "$STARTUP_TIMEOUT" chroot "$DIR" env HOME=/var/lib/rabbitmq rabbitmq-server -detached >&2 ||
		die "rabbitmq-server -detached failed; logs are in $DIR/var/log/rabbitmq"
	# Record at once that we started it, so that stop cleans up even when
	# startup does not finish.
	printf 'epmd_port=%s\ndist_port=%s\nport=%s\n' "$epmd_port" "$dist_port" "$PORT" >"$MARKER"

	log "waiting for the node to start (at most ${STARTUP_TIMEOUT}s)"
	# await_startup fails at once while the VM has not yet registered with
	# epmd, so it is retried until the deadline.
	local deadline=$((SECONDS + STARTUP_TIMEOUT)) i out
	while :; do
		if out=$(timeout 30 chroot "$DIR" env HOME=/var/lib/rabbitmq \
			rabbitmqctl -n "$NODE" await_startup --timeout 25 2>&1); then
			break
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			printf '%s\n' "$out" >&2
			die "the node did not start in ${STARTUP_TIMEOUT}s; logs are in $DIR/var/log/rabbitmq"
		fi
		if [ -z "$(beam_pid)" ]; then
			printf '%s\n' "$out" >&2
			die "the Erlang VM exited during startup; logs are in $DIR/var/log/rabbitmq"
		fi
		sleep 1
	done
	for i in $(seq 1 50); do
		answers 127.0.0.1 "$PORT" && break
		sleep 0.2
	done
	answers 127.0.0.1 "$PORT" || die "the node started but nothing answers on 127.0.0.1:$PORT"
	echo "beam_pid=$(beam_pid)" >>"$MARKER"
	log "RabbitMQ $VERSION is up ($(installed_version)): $(cmd_url)"
}

cmd_stop() {
	need_root
	if [ ! -f "$MARKER" ]; then
		log "no broker started by this script in $DIR; nothing to stop"
		return 0
	fi
	local epmd_port
	epmd_port=$(sed -n 's/^epmd_port=//p' "$MARKER")
	log "stopping node $NODE"
	if ! ctl stop >&2; then
		log "rabbitmqctl stop failed; killing the VM"
	fi
	local i pid
	for i in $(seq 1 $((STOP_TIMEOUT * 5))); do
		[ -z "$(beam_pid)" ] && break
		sleep 0.2
	done
	pid=$(beam_pid)
	if [ -n "$pid" ]; then
		log "the VM (pid $pid) did not stop in ${STOP_TIMEOUT}s; killing it"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	# epmd was started by the VM with our private port; only processes whose
	# root is the chroot are touched.
	for pid in $(chroot_pids epmd); do
		log "stopping the chroot's epmd (pid $pid, port ${epmd_port:-?})"
		kill "$pid" 2>/dev/null || true
	done
	for i in $(seq 1 25); do
		[ -z "$(chroot_pids epmd)" ] && break
		sleep 0.2
	done
	for pid in $(chroot_pids epmd); do
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -f "$MARKER"
	if proc_mounted; then
		log "unmounting $DIR/proc"
		umount "$DIR/proc" || umount -l "$DIR/proc" || log "could not unmount $DIR/proc"
	fi
	log "stopped"
}

cmd_kill9() {
	need_root
	local pid i
	pid=$(beam_pid)
	[ -n "$pid" ] || die "no Erlang VM runs in $DIR"
	log "killing the VM (pid $pid) with SIGKILL"
	kill -KILL "$pid"
	for i in $(seq 1 100); do
		[ -z "$(beam_pid)" ] && break
		sleep 0.1
	done
	[ -z "$(beam_pid)" ] || die "the VM survived SIGKILL"
	# A crashed VM leaves its epmd behind; start picks a fresh one.
	for pid in $(chroot_pids epmd); do
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -f "$MARKER"
	log "killed"
}

# reset wipes the broker this script started back to an empty node (no
# queues, exchanges or messages left by earlier runs), so every test run
# meets the same broker on a machine that is reused.
cmd_reset() {
	need_root
	[ -f "$MARKER" ] || {
		log "the broker on port $PORT was not started by this script; not resetting it"
		return 0
	}
	log "resetting node $NODE to an empty state"
	ctl stop_app >&2
	ctl reset >&2
	ctl start_app >&2
	timeout 60 chroot "$DIR" env HOME=/var/lib/rabbitmq rabbitmqctl -n "$NODE" await_startup --timeout 55 >&2
	local i
	for i in $(seq 1 100); do
		answers 127.0.0.1 "$PORT" && break
		sleep 0.2
	done
	answers 127.0.0.1 "$PORT" || die "the node did not answer on 127.0.0.1:$PORT after reset"
	log "reset done"
}

# oauth2 on KID JWK | off: the node's OAuth 2 backend, set on the running
# node (application environment and signing keys), so tests that need it
# make their own key and nothing else restarts; a restart forgets it.
cmd_oauth2() {
	case "$1" in
	on)
		[ -n "$2" ] && [ -n "$3" ] || die "usage: oauth2 on KID JWK"
		timeout "$CTL_TIMEOUT" chroot "$DIR" env HOME=/var/lib/rabbitmq \
			rabbitmq-plugins -n "$NODE" enable rabbitmq_auth_backend_oauth2 >&2
		ctl eval 'ok = application:set_env(rabbitmq_auth_backend_oauth2, resource_server_id, <<"amqpactor">>),
			ok = application:set_env(rabbit, auth_backends, [rabbit_auth_backend_internal, rabbit_auth_backend_oauth2]).' >&2
		ctl add_signing_key "$2" --json="$3" >&2
		;;
	off)
		ctl eval 'ok = application:set_env(rabbit, auth_backends, [rabbit_auth_backend_internal]).' >&2
		;;
	*) die "usage: oauth2 on KID JWK | oauth2 off" ;;
	esac
}

cmd_url() {
	echo "amqp://guest:guest@127.0.0.1:$PORT/"
}

cmd_status() {
	if answers 127.0.0.1 "$PORT"; then
		if [ -f "$MARKER" ]; then
			log "up on 127.0.0.1:$PORT (started by this script)"
		else
			log "something answers on 127.0.0.1:$PORT (not started by this script)"
		fi
		return 0
	fi
	log "nothing answers on 127.0.0.1:$PORT"
	return 1
}

# --- cluster mode -----------------------------------------------------------

cnode() { echo "rabbitc$1@localhost"; }
cport() { echo $((CLUSTER_PORT + $1 - 1)); }
cdir() { echo "$CLUSTER_BASE/n$1"; } # inside the chroot

valid_n() {
	case "${1:-}" in
	1 | 2 | 3) ;;
	*) die "want a node number 1, 2 or 3, not '${1:-}'" ;;
	esac
}

# cluster_env N: the environment every command about node N runs with: its
# own rabbitmq-env.conf (node name, ports, data and log directories) and the
# tag that tells its processes apart from the single node's.
cluster_env() {
	echo HOME=/var/lib/rabbitmq AMQPACTOR_CLUSTER_NODE="$1" RABBITMQ_CONF_ENV_FILE="$(cdir "$1")/rabbitmq-env.conf"
}

cctl() {
	local n=$1
	shift
	# shellcheck disable=SC2046 # cluster_env is words by design
	timeout "$CTL_TIMEOUT" chroot "$DIR" env $(cluster_env "$n") rabbitmqctl -n "$(cnode "$n")" "$@"
}

cluster_write_config() {
	local n=$1 dist_port=$2 epmd_port=$3 d
	d=$(cdir "$n")
	mkdir -p "$DIR$d/mnesia" "$DIR$d/log"
	cat >"$DIR$d/rabbitmq.conf" <<-EOF
		# Written by amqpactor's test/broker/rabbitmq4.sh cluster-start.
		listeners.tcp.default = $(cport "$n")
		loopback_users = none
	EOF
	cat >"$DIR$d/rabbitmq-env.conf" <<-EOF
		# Written by amqpactor's test/broker/rabbitmq4.sh cluster-start.
		NODENAME=$(cnode "$n")
		DIST_PORT=$dist_port
		ERL_EPMD_PORT=$epmd_port
		CONFIG_FILE=$d/rabbitmq.conf
		MNESIA_BASE=$d/mnesia
		LOG_BASE=$d/log
		ulimit -S -n "\$(ulimit -H -n)" 2>/dev/null || true
	EOF
}

# cluster_boot N: start node N detached (its data decides whether it is new
# or rejoins) and wait until it has booted.
cluster_boot() {
	local n=$1
	log "starting cluster node $(cnode "$n") (AMQP port $(cport "$n"))"
	# shellcheck disable=SC2046
	timeout "$STARTUP_TIMEOUT" chroot "$DIR" env $(cluster_env "$n") rabbitmq-server -detached >&2 ||
		die "rabbitmq-server -detached failed for node $n; logs are in $DIR$(cdir "$n")/log"
}

cluster_await() {
	local n=$1 deadline=$((SECONDS + STARTUP_TIMEOUT)) out i
	while :; do
		if out=$(CTL_TIMEOUT=30 cctl "$n" await_startup --timeout 25 2>&1); then
			break
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			printf '%s\n' "$out" >&2
			die "cluster node $n did not start in ${STARTUP_TIMEOUT}s; logs are in $DIR$(cdir "$n")/log"
		fi
		if [ -z "$(chroot_pids beam.smp "$n")$(chroot_pids beam "$n")" ]; then
			printf '%s\n' "$out" >&2
			die "the Erlang VM of cluster node $n exited during startup; logs are in $DIR$(cdir "$n")/log"
		fi
		sleep 1
	done
	for i in $(seq 1 50); do
		answers 127.0.0.1 "$(cport "$n")" && return 0
		sleep 0.2
	done
	die "cluster node $n started but nothing answers on 127.0.0.1:$(cport "$n")"
}

cluster_answers() {
	local n
	for n in 1 2 3; do
		answers 127.0.0.1 "$(cport "$n")" || return 1
	done
}

cmd_cluster_start() {
	need_root
	if [ -f "$CLUSTER_MARKER" ] && cluster_answers; then
		log "a cluster started by this script already answers on ports $(cport 1)-$(cport 3); reusing it"
		return 0
	fi
	ensure_installed
	ensure_hosts
	ensure_proc
	if [ -n "$(chroot_pids beam.smp any)$(chroot_pids beam any)" ]; then
		log "cluster nodes of an earlier run are left; stopping them first"
		cmd_cluster_stop
		ensure_proc
	fi
	local n
	for n in 1 2 3; do
		! answers 127.0.0.1 "$(cport "$n")" || die "port $(cport "$n") is taken (set AMQPACTOR_CLUSTER_PORT)"
	done
	local epmd_port d1 d2 d3
	epmd_port=$(free_port "$CLUSTER_EPMD_BASE")
	d1=$(free_port "$CLUSTER_DIST_BASE")
	d2=$(free_port $((d1 + 1)))
	d3=$(free_port $((d2 + 1)))
	rm -rf "${DIR:?}$CLUSTER_BASE"
	cluster_write_config 1 "$d1" "$epmd_port"
	cluster_write_config 2 "$d2" "$epmd_port"
	cluster_write_config 3 "$d3" "$epmd_port"
	chroot "$DIR" chown -R rabbitmq:rabbitmq "$CLUSTER_BASE"
	printf 'epmd_port=%s\n' "$epmd_port" >"$CLUSTER_MARKER"
	# The nodes share the chroot's Erlang cookie (/var/lib/rabbitmq/.erlang.cookie).
	local t0=$SECONDS
	for n in 1 2 3; do cluster_boot "$n"; done
	for n in 1 2 3; do cluster_await "$n"; done
	for n in 2 3; do
		log "joining $(cnode "$n") to $(cnode 1)"
		cctl "$n" stop_app >&2
		cctl "$n" join_cluster "$(cnode 1)" >&2
		cctl "$n" start_app >&2
		cluster_await "$n"
	done
	local running
	running=$(cctl 1 eval 'length(rabbit_nodes:list_running()).' 2>/dev/null | tr -d '[:space:]')
	[ "$running" = 3 ] || die "the cluster has ${running:-no} running nodes, not 3"
	log "cluster up in $((SECONDS - t0))s: $(cmd_cluster_urls)"
}

cmd_cluster_stop() {
	need_root
	local n pid i
	for n in 1 2 3; do
		[ -n "$(chroot_pids beam.smp "$n")$(chroot_pids beam "$n")" ] || continue
		log "stopping cluster node $(cnode "$n")"
		CTL_TIMEOUT=30 cctl "$n" stop >&2 || log "rabbitmqctl stop failed for node $n; killing it"
	done
	for i in $(seq 1 150); do
		[ -z "$(chroot_pids beam.smp any)$(chroot_pids beam any)" ] && break
		sleep 0.2
	done
	for pid in $(chroot_pids beam.smp any) $(chroot_pids beam any) $(chroot_pids epmd any); do
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -rf "${DIR:?}$CLUSTER_BASE"
	log "cluster stopped"
}

cmd_cluster_kill() {
	need_root
	valid_n "${1:-}"
	local pid i
	pid=$({ chroot_pids beam.smp "$1"; chroot_pids beam "$1"; } | head -n1)
	[ -n "$pid" ] || die "cluster node $1 does not run"
	log "killing cluster node $(cnode "$1") (pid $pid) with SIGKILL"
	kill -KILL "$pid"
	for i in $(seq 1 100); do
		[ -z "$(chroot_pids beam.smp "$1")$(chroot_pids beam "$1")" ] && break
		sleep 0.1
	done
	[ -z "$(chroot_pids beam.smp "$1")$(chroot_pids beam "$1")" ] || die "node $1 survived SIGKILL"
	log "killed"
}

cmd_cluster_restart() {
	need_root
	valid_n "${1:-}"
	[ -f "$CLUSTER_MARKER" ] || die "no cluster started by this script"
	if answers 127.0.0.1 "$(cport "$1")"; then
		log "cluster node $1 already answers"
		return 0
	fi
	local t0=$SECONDS
	cluster_boot "$1"
	cluster_await "$1"
	log "cluster node $1 back in $((SECONDS - t0))s"
}

cmd_cluster_urls() {
	echo "amqp://guest:guest@127.0.0.1:$(cport 1)/ amqp://guest:guest@127.0.0.1:$(cport 2)/ amqp://guest:guest@127.0.0.1:$(cport 3)/"
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
url) cmd_url ;;
version) echo "$VERSION" ;;
status) cmd_status ;;
kill9) cmd_kill9 ;;
reset) cmd_reset ;;
cluster-start) cmd_cluster_start ;;
cluster-stop) cmd_cluster_stop ;;
cluster-kill) cmd_cluster_kill "${2:-}" ;;
cluster-restart) cmd_cluster_restart "${2:-}" ;;
cluster-urls) cmd_cluster_urls ;;
cluster-ctl)
	valid_n "${2:-}"
	need_root
	n=$2
	shift 2
	cctl "$n" "$@"
	;;
ctl)
	shift
	need_root
	ctl "$@"
	;;
oauth2)
	need_root
	cmd_oauth2 "${2:-}" "${3:-}" "${4:-}"
	;;
*)
	echo "usage: $0 start|stop|reset|url|version|status|kill9|ctl ARGS..|oauth2 on KID JWK|oauth2 off|cluster-start|cluster-stop|cluster-kill N|cluster-restart N|cluster-urls|cluster-ctl N ARGS.." >&2
	exit 2
	;;
esac
