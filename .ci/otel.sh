#!/usr/bin/env bash
# CI for the OpenTelemetry module (issue 25): vet and the race-enabled
# tests, which run against the SDK's in-memory span recorder and manual
# metric reader (no collector needed), and compare the metric names with
# the Prometheus module's through OpenTelemetry's Prometheus exporter.
# Called by .ci/run; needs the Go module proxy for go.opentelemetry.io.
set -euo pipefail
cd "$(dirname "$0")/../otel"

echo "== otel module: go vet and go test -race"
go vet ./...
go test -race ./...
