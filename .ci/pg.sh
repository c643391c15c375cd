#!/usr/bin/env bash
# The PostgreSQL store (module postgres/) against a real PostgreSQL: starts
# a private cluster on 127.0.0.1 with .ci/postgres.sh (installing Debian's
# postgresql if missing), runs the module's vet and its tests with
# ONCEKV_PG_DSN set (race detector on: the store, and pgidem, idemhttp's
# suite on PostgreSQL), then the examples module's replica torture test
# (examples/replicas) and the bench module's PostgreSQL peers (its protocol
# test and the pg cells on a tiny workload) and HTTP cells (bench/httpcmp's
# TestCells: every cell of both stores, a few requests each), then stops
# the cluster, whatever happened. The root's conformance run of the same suite is part of the
# root's go test.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

export ONCEKV_PG_STATE=${ONCEKV_PG_STATE:-/tmp/oncekv-ci-pg.dir}
export ONCEKV_PG_PORT=${ONCEKV_PG_PORT:-55433}
bash .ci/postgres.sh stop >/dev/null 2>&1 || true # a cluster a killed run left
ONCEKV_PG_DSN=$(bash .ci/postgres.sh)
export ONCEKV_PG_DSN
trap 'bash "$root/.ci/postgres.sh" stop' EXIT

cd postgres
echo "== go vet (postgres module)"
go vet ./...
echo "== go test -race (postgres module, PostgreSQL at $ONCEKV_PG_DSN)"
go test -race -count=1 ./...

cd "$root/examples"
echo "== the replica torture test (examples/replicas: 3 replicas, 8 clients, SIGKILL and SIGSTOP)"
go test -count=1 -v -run TestReplicasTortured ./replicas

cd "$root/bench"
echo "== the bench module's PostgreSQL peers (postgres, oncekv-pg) on a tiny workload"
ONCEKV_BENCH_PG_DSN=$ONCEKV_PG_DSN go test -count=1 -run 'TestProtocol|TestSuiteSmokePG' .
echo "== the bench module's HTTP cells, embedded and PostgreSQL (bench/httpcmp), on a tiny workload"
ONCEKV_BENCH_PG_DSN=$ONCEKV_PG_DSN go test -count=1 -run TestCells ./httpcmp
