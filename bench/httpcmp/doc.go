// Package httpcmp benchmarks the idemhttp middleware against the bare
// handler it wraps, over real HTTP on loopback, on each durable store the
// middleware runs on: the embedded one (idemhttp over *oncekv.DB) and
// PostgreSQL (postgres/pgidem over *postgres.Store, with
// ONCEKV_BENCH_PG_DSN). Per store: a first request (a Claim and a
// Complete, two commits), a replay (one read), and first requests from 1
// and 8 concurrent clients. The benchmarks are in the package's tests; see
// README.md for the command and the last measured numbers.
package httpcmp
