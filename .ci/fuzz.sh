#!/usr/bin/env bash
# Fuzz every go test -fuzz target of the core module for FUZZTIME each
# (default 30s). The seeds of every target already run in plain `go test`;
# this explores past them. A failure leaves its input in the package's
# testdata/fuzz/<Target>/ for `go test -run <Target>/<name>` to replay.
#
#   .ci/fuzz.sh                 # every target, 30s each
#   FUZZTIME=5m .ci/fuzz.sh     # a soak run
#   .ci/fuzz.sh ./internal/layout  # only the targets of these packages
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZTIME:-30s}
pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
	mapfile -t pkgs < <(go list -f '{{.Dir}}' ./... | sed "s|^$PWD|.|")
fi

total=0
for pkg in "${pkgs[@]}"; do
	# Fuzz targets are top-level functions "func FuzzXxx(f *testing.F)".
	targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*(f \*testing\.F)' "$pkg"/*_test.go 2>/dev/null |
		sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/' | sort -u || true)
	for target in $targets; do
		echo "== fuzz $pkg $target for $fuzztime"
		go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg"
		total=$((total + 1))
	done
done
echo "== fuzzed $total targets for $fuzztime each"
