#!/usr/bin/env bash
# CI for package jcs (RFC 8785): its comparison with an ECMAScript engine,
# Node.js, made required here (the tests skip without node elsewhere), and
# the reference implementation's number file checked over ten million
# lines instead of the default million. Called by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== node for the jcs comparison with an ECMAScript engine"
command -v node || (apt-get update && apt-get install -y nodejs)
node --version

echo "== jcs against node, and 10^7 lines of the reference number file"
ONCEKV_JCS_NODE=required go test -count=1 -run 'TestNode' ./jcs
ONCEKV_JCS_NUMBER_LINES=10000000 go test -count=1 -run 'TestES6NumberFile' ./jcs
