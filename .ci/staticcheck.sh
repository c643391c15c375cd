#!/usr/bin/env bash
# staticcheck (honnef.co/go/tools, pinned) on every module of the repository:
# the root module (the core and its satellites queue/, relay/, retry/,
# idemhttp/, cmd/) and each directory with a go.mod of its own (bench,
# examples, prometheus, and any module added later). Test files included.
# Runs every module, then exits non-zero if any had a finding. Called by
# .ci/run; needs the Go module proxy the first time (then Go's build cache
# has it).
#
#   .ci/staticcheck.sh                 # every module
#   .ci/staticcheck.sh bench queue     # only the modules or packages of these dirs
set -euo pipefail
cd "$(dirname "$0")/.."

version=v0.8.2 # go1.26-capable; bump here, nowhere else
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
echo "== installing staticcheck $version"
GOBIN="$bin" go install "honnef.co/go/tools/cmd/staticcheck@$version"

dirs=("$@")
if [ ${#dirs[@]} -eq 0 ]; then
	# Every go.mod, the root's first; nothing under testdata or a hidden dir.
	mapfile -t dirs < <(find . -name go.mod -not -path '*/testdata/*' -not -path '*/.*/*' |
		xargs -n1 dirname | sort)
fi

failed=()
for dir in "${dirs[@]}"; do
	echo "== staticcheck $dir"
	(cd "$dir" && "$bin/staticcheck" ./...) || failed+=("$dir")
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "== staticcheck: findings in ${failed[*]}"
	exit 1
fi
echo "== staticcheck: ${dirs[*]} clean"
