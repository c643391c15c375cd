#!/usr/bin/env bash
# CI for the metrics work: the Prometheus collector's module (vet and tests:
# lint, compare, the dashboard's names) and the file-plateau benchmark at a
# scale that takes seconds. Called by .ci/run; needs the Go module proxy for
# github.com/prometheus/client_golang.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== prometheus module: go vet and go test"
(cd prometheus && go vet ./... && go test ./...)

echo "== bench: the plateau benchmark in test mode (30 simulated days, 100 keys/h)"
(cd bench && go test -count=1 -run 'TestPlateau' .)
