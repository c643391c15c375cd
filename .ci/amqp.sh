#!/usr/bin/env bash
# CI for the RabbitMQ and Watermill modules (issue 26): starts a private
# RabbitMQ node on 127.0.0.1 with the shared .ci/rabbitmq.sh (which
# installs Debian's rabbitmq-server when missing), runs go vet and the
# tests of rabbitmq/ and watermill/ against it with ONCEKV_AMQP_URL and
# ONCEKV_AMQP_RESTART set, and stops the node on exit. Extra arguments go
# to go test (-run, -v, ...); ONCEKV_AMQP_SOAK=N runs the chaos test with
# N times the messages.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== rabbitmq-server, for the rabbitmq and watermill modules"
if env_lines=$(bash .ci/rabbitmq.sh start); then
	eval "$env_lines"
	trap 'bash .ci/rabbitmq.sh stop "$ONCEKV_RABBITMQ_DIR"' EXIT
	echo "RabbitMQ on $ONCEKV_AMQP_URL"
else
	echo "rabbitmq-server could not be installed or started: the broker tests will skip"
fi

for m in rabbitmq watermill; do
	echo "== the $m module: go vet, go test -race"
	(cd "$m" && go vet ./... && go test -race -count=1 "$@" ./...)
done
