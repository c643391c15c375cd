#!/usr/bin/env bash
# CI for idemhttp's OpenAPI fragment (issue 24, part 4): the test module
# idemhttp/openapitest loads the fragment into a whole OpenAPI 3.1 document
# with kin-openapi, validates it, and validates real answers of the
# middleware against it. Called by .ci/run; needs the Go module proxy for
# kin-openapi the first time.
set -euo pipefail
cd "$(dirname "$0")/../idemhttp/openapitest"

echo "== idemhttp/openapitest module: go vet and go test -race"
go vet ./...
go test -race ./...
