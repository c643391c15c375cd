// Package pgidem runs the HTTP Idempotency-Key middleware of package
// idemhttp on the PostgreSQL store, so that the replicas of a service
// behind a load balancer share one record per (caller, key): a retry that
// lands on another replica gets the first answer back instead of running
// the handler again.
//
// It is idemhttp's middleware, not a copy: the same Options, answers
// (replay, 409 with Retry-After, 422, 413, 401, problem+json), heartbeat
// and release on a 5xx, a panic or a client gone. idemhttp.Key,
// idemhttp.Token and idemhttp.DoNotStore work on its requests as they do
// on the embedded store's. What differs:
//
//   - Stage (this package's) queues writes that run in the pgx.Tx that
//     stores the response: a handler's rows and the stored answer commit
//     together or not at all, as with idemhttp.Stage and bbolt.
//     idemhttp.Stage on a request of this middleware is refused with
//     idemhttp.ErrNoClaim.
//   - Leases, Retry-After and the dedup window are on the store's clock,
//     the database's for every replica. A replica that dies mid-handler
//     leaves its key claimed until its lease runs out (Options.Lease,
//     after the last heartbeat); then a retry on any replica takes it over
//     with a greater token, and the dead replica's late answer, if it was
//     only paused, is fenced and stores nothing.
//   - idemhttp.Lookup reads the embedded store only; a PostgreSQL record
//     is a mark under Options.Handler and idemhttp.RecordKey(scope, key),
//     its Response decoded by idemhttp.ParseRecord.
package pgidem
