#!/usr/bin/env bash
# A private PostgreSQL cluster for the tests and the benchmarks, the one
# script every module uses: installs Debian's postgresql if missing, starts
# a cluster under a temp dir, listening on 127.0.0.1 only, and prints its
# DSN on stdout.
#
#   dsn=$(bash .ci/postgres.sh)            # start; progress goes to stderr
#   ONCEKV_PG_DSN=$dsn go test ./...       # (in postgres/) the store's tests
#   (cd bench && go run . -pg-dsn "$dsn")  # the benchmarks
#   bash .ci/postgres.sh stop              # stop it and remove its dir
#
# The cluster runs as the postgres user (PostgreSQL refuses to run as root).
# Its directory is remembered in $ONCEKV_PG_STATE so that stop finds it;
# ONCEKV_PG_PORT picks the port, so two clusters can run side by side.
# (The bench module's names, ONCEKV_BENCH_PG_STATE/PORT/USER, still work.)
set -euo pipefail

STATE=${ONCEKV_PG_STATE:-${ONCEKV_BENCH_PG_STATE:-/tmp/oncekv-pg.dir}}
PORT=${ONCEKV_PG_PORT:-${ONCEKV_BENCH_PG_PORT:-55432}}
RUN_AS=${ONCEKV_PG_USER:-${ONCEKV_BENCH_PG_USER:-postgres}}

log() { echo "postgres.sh: $*" >&2; }

# as runs a command as the cluster's owner when we are root.
as() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u "$RUN_AS" -- "$@"
	else
		"$@"
	fi
}

bindir() {
	local d
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
	if [ -z "$d" ] && command -v pg_ctl >/dev/null; then
		d=$(dirname "$(readlink -f "$(command -v pg_ctl)")")
	fi
	echo "$d"
}

stop() {
	if [ ! -f "$STATE" ]; then
		log "no cluster running ($STATE missing)"
		return 0
	fi
	local dir
	dir=$(cat "$STATE")
	if [ -d "$dir/data" ]; then
		as "$(bindir)/pg_ctl" -D "$dir/data" -m fast -w stop >&2 || true
	fi
	rm -rf "$dir" "$STATE"
	log "stopped and removed $dir"
}

start() {
	if [ -f "$STATE" ]; then
		log "a cluster is already running in $(cat "$STATE"); run '$0 stop' first"
		exit 1
	fi
	local bin
	bin=$(bindir)
	if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
		log "installing postgresql"
		if [ "$(id -u)" != 0 ]; then
			log "postgresql is missing and only root can install it"
			exit 1
		fi
		apt-get update >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql >&2
		bin=$(bindir)
	fi
	if [ "$(id -u)" = 0 ] && ! id "$RUN_AS" >/dev/null 2>&1; then
		useradd --system --no-create-home "$RUN_AS"
	fi

	local dir
	dir=$(mktemp -d /tmp/oncekv-pg.XXXXXX)
	chmod 755 "$dir"
	[ "$(id -u)" = 0 ] && chown "$RUN_AS" "$dir"
	echo "$dir" >"$STATE"

	as "$bin/initdb" -D "$dir/data" -U bench --auth=trust -E UTF8 --no-locale >&2
	# fsync and synchronous_commit stay on: the durable rows must be durable.
	# Enough connections for the multi-process tests (several pools at once).
	as "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
		-o "-c listen_addresses=127.0.0.1 -c port=$PORT -c unix_socket_directories=$dir -c max_connections=200" \
		start >&2
	as "$bin/createdb" -h 127.0.0.1 -p "$PORT" -U bench bench >&2
	log "running in $dir"
	echo "postgres://bench@127.0.0.1:$PORT/bench?sslmode=disable"
}

case "${1:-start}" in
start) start ;;
stop) stop ;;
*)
	echo "usage: $0 [start|stop]" >&2
	exit 2
	;;
esac
