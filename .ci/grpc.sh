#!/usr/bin/env bash
# CI for the gRPC idempotency interceptors (idemgrpc/, issue 26): vet and
# the race-enabled tests, in memory (bufconn) and with real server
# processes on 127.0.0.1 SIGKILLed mid-handler. Called by .ci/run; needs
# the Go module proxy for google.golang.org/grpc.
set -euo pipefail
cd "$(dirname "$0")/../idemgrpc"

echo "== idemgrpc module: go vet and go test -race"
go vet ./...
go test -race ./...
