#!/usr/bin/env bash
# Build and vet every module, tests included, for the desktop and edge
# platforms the library promises (issue 21): Windows, macOS on ARM, 64- and
# 32-bit ARM Linux. go vet type-checks the tests too, so a Unix-only test
# that is not tagged, or a constant too large for a 32-bit int, fails here
# rather than on a user's machine. cgo is off in a cross-build: code that
# needs it has a !cgo stand-in.
#
#   .ci/cross.sh                   # every module, every platform
#   .ci/cross.sh windows/amd64     # one platform
set -euo pipefail
cd "$(dirname "$0")/.."

platforms=("$@")
if [ ${#platforms[@]} -eq 0 ]; then
	platforms=(windows/amd64 darwin/arm64 linux/arm64 linux/arm)
fi
mapfile -t modules < <(find . -name go.mod -not -path './.git/*' -printf '%h\n' | sort)

failed=0
for platform in "${platforms[@]}"; do
	for module in "${modules[@]}"; do
		echo "== go vet $module for $platform"
		if ! (cd "$module" && GOOS=${platform%/*} GOARCH=${platform#*/} CGO_ENABLED=0 go vet ./...); then
			failed=1
		fi
	done
done
exit $failed
