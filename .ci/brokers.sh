#!/usr/bin/env bash
# CI for the broker examples (issue 13): installs Debian's mosquitto and
# nats-server when missing, starts each on 127.0.0.1 on a free port (NATS
# with JetStream, its store in a temporary directory), exports their URLs
# and runs the examples' MQTT and NATS tests against them, then stops both.
# .ci/run calls it. The tests skip, saying so, only where a server cannot
# be installed or started. Extra arguments go to go test (-run, -v, ...);
# ONCEKV_BROKER_SOAK=N runs N times the messages.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== mosquitto and nats-server, for the broker examples"
if ! command -v mosquitto >/dev/null || ! command -v nats-server >/dev/null; then
	(apt-get update && apt-get install -y mosquitto nats-server) ||
		echo "mosquitto or nats-server could not be installed: their tests will skip"
fi
# Debian installs them in /usr/sbin, which a non-root PATH may lack.
export PATH="$PATH:/usr/sbin"

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

# free_port asks the kernel for a free port on 127.0.0.1.
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
		echo $((20000 + RANDOM % 20000))
}

# wait_port waits up to 10s for something to listen on 127.0.0.1:$1.
wait_port() {
	for _ in $(seq 100); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

if command -v mosquitto >/dev/null; then
	port=$(free_port)
	# Unlimited queued messages: the test's consumer is offline for a while
	# after each kill, and the default of 1000 would drop what it misses.
	cat >"$tmp/mosquitto.conf" <<-CONF
		listener $port 127.0.0.1
		allow_anonymous true
		persistence false
		max_queued_messages 0
		max_inflight_messages 20
	CONF
	mosquitto -c "$tmp/mosquitto.conf" >"$tmp/mosquitto.log" 2>&1 &
	pids+=($!)
	if wait_port "$port"; then
		export ONCEKV_MQTT_URL="tcp://127.0.0.1:$port"
		echo "mosquitto on $ONCEKV_MQTT_URL"
	else
		echo "mosquitto did not start: the MQTT test will skip"
		cat "$tmp/mosquitto.log"
	fi
fi

if command -v nats-server >/dev/null; then
	port=$(free_port)
	mkdir -p "$tmp/jetstream"
	nats-server -a 127.0.0.1 -p "$port" -js -sd "$tmp/jetstream" >"$tmp/nats.log" 2>&1 &
	pids+=($!)
	if wait_port "$port"; then
		export ONCEKV_NATS_URL="nats://127.0.0.1:$port"
		echo "nats-server on $ONCEKV_NATS_URL"
	else
		echo "nats-server did not start: the NATS test will skip"
		cat "$tmp/nats.log"
	fi
fi

echo "== the examples module: the MQTT and NATS tests"
cd examples
go test -count=1 "$@" ./mqtt/... ./nats/...
