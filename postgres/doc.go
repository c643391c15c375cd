// Package postgres is oncekv's contract on PostgreSQL, for when one
// machine is not enough: the same Apply, ApplyBatch, Claim and fences as
// the embedded store (package oncekv), with the dedup state in a schema
// that every host of a consumer group shares. A program moves from the
// embedded store by changing Open and its effects' parameter: the effect
// gets the pgx.Tx its writes go through, and those writes commit with the
// DONE mark or not at all.
//
//	pool, err := pgxpool.New(ctx, dsn)
//	...
//	store, err := postgres.Open(ctx, pool, postgres.Options{})
//	...
//	res, err := store.Apply(ctx, oncekv.Request{Handler: "deposit", Key: msg.ID, Payload: msg.Body},
//		func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
//			_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", msg.Amount, msg.Account)
//			return []byte("ok"), err
//		})
//
// It reuses the root's Request, Result, BatchResult, ExpireStats and
// errors, so errors.Is(err, oncekv.ErrKeyReuse), errors.As with
// *oncekv.InProgressError or *oncekv.FenceError, and oncekv.Classify work
// unchanged; Claim.Key is the embedded store's for the same (Handler,
// Key). One conformance suite (oncekv's internal/conformance) runs against
// both stores; its package comment is the one list of where they differ.
//
// # Guarantees
//
//   - The effect's writes and the DONE mark commit in one PostgreSQL
//     transaction: both or neither, whatever fails (a SIGKILL, a lost
//     connection: tested with real child processes and
//     pg_terminate_backend).
//   - A duplicate is answered by one plain read, without a transaction
//     block, a row lock, a write or DDL, so duplicates keep flowing while
//     writers, long effects or an expiry hold locks.
//   - One mark per key, across hosts and across the partitions (which
//     PostgreSQL cannot enforce itself): every writer of a key's mark holds
//     the key's transaction-scoped advisory lock, taken without waiting,
//     and looks in every live partition under it (see docs/postgres.md).
//   - A key held by a live claim, or by another host's running effect, is
//     oncekv.ErrInProgress at once: a request never waits for another
//     host.
//   - Claim tokens come from a sequence, and are handed out only once the
//     claim committed: strictly greater at every takeover, on any host. A
//     zombie's Extend, Complete and Fail get oncekv.ErrFenced and change
//     nothing. AdvanceFence fences the caller's own writes in its own
//     transaction.
//   - Leases and windows are on one clock for every host: the database's,
//     unless Options.Now injects one; the store's time never goes back.
//   - Windows are partitions of the marks table, made ahead of time outside
//     any Apply transaction and expired whole: detached concurrently and
//     dropped, never deleted row by row, so expiry leaves no dead tuple and
//     costs the same for a window of a thousand marks or a million. A key is
//     deduplicated for at least Options.Retention.
//   - A takeover can look before it acts again: ClaimWith runs the
//     embedded store's oncekv.ClaimOptions probe, which records the key
//     DONE, lets the claim proceed, or parks the key. A parked key answers
//     every request on every host with oncekv.ErrParked, and expiry keeps
//     it, until an operator calls Store.ResolveParked (Store.Parked lists
//     them; tested with a worker process SIGKILLed after its charge).
//   - With Options.TombstoneRetention, a key's window past Retention
//     leaves a tombstone, and its duplicates are still suppressed
//     (oncekv.Result.ResponseExpired) until TombstoneRetention.
//
// # Caveats
//
//   - Effectively-once, not exactly-once: an effect whose transaction
//     rolled back may have run; only committed runs leave changes, so an
//     effect must change nothing outside its transaction (use a Claim for
//     external calls).
//   - A connection lost during COMMIT leaves the outcome unknown to the
//     caller, as with any database: the error says to retry, and the retry
//     is answered from the mark if the commit happened.
//   - Every live partition costs each look-up of an unseen key an index
//     probe (and each query its planning and locks): keep
//     Retention/WindowSpan small (the default, a day's windows for 7 days,
//     is 8).
//   - Advisory locks live in one space per database: the store's keys are
//     hashed into it, salted by the schema; a program that takes advisory
//     locks of its own may, very rarely, share one with a key and see
//     ErrInProgress.
package postgres
