#!/usr/bin/env bash
# CI for the Kafka and SQS modules (issue 26): go vet and the tests of
# each. Neither needs a server installed: the Kafka tests run against
# franz-go's in-process Kafka-protocol cluster (kfake; no Kafka broker is
# installable here), the SQS tests against goaws (an SQS-compatible server
# from the Go module proxy) started inside the test process on 127.0.0.1.
# Both SIGKILL real consumer processes. Called by .ci/run; needs the Go
# module proxy. Extra arguments go to go test (-run, -v, ...);
# ONCEKV_KAFKA_SOAK=N and ONCEKV_SQS_SOAK=N run N times the messages and
# kills.
set -euo pipefail
cd "$(dirname "$0")/.."

for m in kafka sqs; do
	[ -f "$m/go.mod" ] || continue
	echo "== $m module: go vet"
	(cd "$m" && go vet ./...)
	echo "== $m module: go test -race"
	(cd "$m" && go test -race -count=1 "$@" ./...)
done
