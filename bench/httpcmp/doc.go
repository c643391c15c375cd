// Package httpcmp benchmarks the idemhttp middleware against the bare
// handler it wraps, over real HTTP on loopback and a durable store: a first
// request (a Claim and a Complete, two commits), a replay (a read
// transaction), and first requests from 1 and 8 concurrent clients. The
// benchmarks are in the package's tests; see README.md for the command and
// the last measured numbers.
package httpcmp
