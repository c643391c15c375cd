#!/usr/bin/env bash
# A private RabbitMQ node for tests (issue 26), shared by every script that
# needs one: Debian's rabbitmq-server (installed when missing), listening on
# 127.0.0.1 only (AMQP, Erlang distribution, and a private epmd), its
# database, logs, cookie and config in a directory of its own.
#
#   .ci/rabbitmq.sh start [DIR]    start a node in DIR (default: a new
#                                  temporary directory); prints, on stdout,
#                                  export lines for eval, among them
#                                  ONCEKV_AMQP_URL and ONCEKV_AMQP_RESTART
#   .ci/rabbitmq.sh restart DIR    SIGKILL the node (a crash, not a clean
#                                  stop) and start it again on the same
#                                  port and database
#   .ci/rabbitmq.sh stop DIR       stop the node and its epmd, remove DIR
#
# ONCEKV_AMQP_RESTART is the restart command line, for tests that restart
# the broker in the middle of a run. Everything else goes to stderr. start
# exits 1, printing nothing on stdout, when the server cannot be installed
# or does not start within 90s.
set -euo pipefail

script=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
sbin=/usr/lib/rabbitmq/bin

say() { echo "rabbitmq.sh: $*" >&2; }

# free_port asks the kernel for a free port on 127.0.0.1.
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
		echo $((20000 + RANDOM % 20000))
}

# node_env exports, for the node in $dir, what rabbitmq-server and
# rabbitmqctl read; the ports come from $dir/ports.
node_env() {
	# shellcheck disable=SC1091
	. "$dir/ports"
	export HOME="$dir" # the Erlang cookie of the node and of rabbitmqctl
	export RABBITMQ_NODENAME="$nodename"
	export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
	export RABBITMQ_NODE_PORT="$amqp_port"
	export RABBITMQ_DIST_PORT="$dist_port"
	export ERL_EPMD_ADDRESS=127.0.0.1
	export ERL_EPMD_PORT="$epmd_port"
	export RABBITMQ_MNESIA_BASE="$dir/mnesia"
	export RABBITMQ_LOG_BASE="$dir/log"
	export RABBITMQ_PID_FILE="$dir/node.pid"
	export RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf"
	export RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config"
	export RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf"
	export RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins"
	export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
	export RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
}

ctl() { "$sbin/rabbitmqctl" -n "$nodename" "$@"; }

# launch starts the node in the background and waits until it serves.
launch() {
	node_env
	"$sbin/rabbitmq-server" >>"$dir/log/server.out" 2>&1 &
	echo $! >"$dir/launcher.pid"
	if ! ctl wait "$dir/node.pid" --timeout 90 >&2; then
		say "the node did not start; its log:"
		tail -n 50 "$dir/log/server.out" >&2 || true
		return 1
	fi
}

# kill_node SIGKILLs the node's Erlang VM, if it runs, waits for it to
# end, and removes its pid file, which would mislead the next launch's wait.
kill_node() {
	local pid
	pid=$(cat "$dir/node.pid" 2>/dev/null || true)
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -9 "$pid" 2>/dev/null || true
		while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	fi
	pid=$(cat "$dir/launcher.pid" 2>/dev/null || true)
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -f "$dir/node.pid" "$dir/launcher.pid"
}

start() {
	if [ ! -x "$sbin/rabbitmq-server" ]; then
		say "installing rabbitmq-server"
		(apt-get update && apt-get install -y rabbitmq-server) >&2 || {
			say "rabbitmq-server could not be installed"
			return 1
		}
	fi
	dir=${1:-$(mktemp -d /tmp/oncekv-rabbitmq.XXXXXX)}
	mkdir -p "$dir/mnesia" "$dir/log"
	cat >"$dir/ports" <<-PORTS
		nodename=oncekv-$$-$RANDOM@localhost
		amqp_port=$(free_port)
		dist_port=$(free_port)
		epmd_port=$(free_port)
	PORTS
	# No plugins (no management listener on 15672), and guest, which
	# RabbitMQ lets in from the loopback interface only.
	echo "[]." >"$dir/enabled_plugins"
	: >"$dir/rabbitmq-env.conf"
	echo "[]." >"$dir/advanced.config"
	cat >"$dir/rabbitmq.conf" <<-CONF
		loopback_users.guest = true
		log.console = false
		log.file.level = warning
	CONF
	local t0=$SECONDS
	launch || return 1
	say "node $nodename on 127.0.0.1:$amqp_port, started in $((SECONDS - t0))s, files in $dir"
	echo "export ONCEKV_AMQP_URL=amqp://guest:guest@127.0.0.1:$amqp_port/"
	echo "export ONCEKV_RABBITMQ_DIR=$dir"
	echo "export ONCEKV_AMQP_RESTART='bash $script restart $dir'"
}

restart() {
	dir=$1
	node_env
	kill_node
	local t0=$SECONDS
	launch
	say "node $nodename restarted in $((SECONDS - t0))s"
}

stop() {
	dir=$1
	[ -f "$dir/ports" ] || return 0
	node_env
	local pid
	pid=$(cat "$dir/node.pid" 2>/dev/null || true)
	ctl stop >/dev/null 2>&1 || true
	# A clean stop first; whatever still runs after 10s is killed.
	for _ in $(seq 100); do
		[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill_node
	epmd -port "$epmd_port" -kill >/dev/null 2>&1 || true
	rm -rf "$dir"
}

cmd=${1:-}
shift || true
case "$cmd" in
start) start "$@" ;;
restart) restart "$1" ;;
stop) stop "$1" ;;
*)
	echo "usage: $0 start [DIR] | restart DIR | stop DIR" >&2
	exit 2
	;;
esac
