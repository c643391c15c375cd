#!/usr/bin/env bash
# CI for the HTTP work (issue 14): the examples module, whose checkout test
# drives Debian's headless Chromium. .ci/run calls it; it installs chromium
# when missing (the test skips, saying so, only where that fails).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== chromium, for the browser test of examples/checkout"
command -v chromium || (apt-get update && apt-get install -y chromium) ||
	echo "chromium could not be installed: the browser test will skip"

echo "== curl and bash, for the run of docs/dupproxy.md's session (TestDocsDupproxySession)"
command -v curl || (apt-get update && apt-get install -y curl) ||
	echo "curl could not be installed: the session test will skip"

echo "== the examples module: go vet, go test"
cd examples
go vet ./...
go test ./...
