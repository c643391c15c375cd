// Package oncekvtest checks that a handler on oncekv applies its effect
// once however its messages are delivered: the article's property test
// (applying a multiset S and the same S with duplicates gives the same
// final state, f(f(x)) = f(x) at the level of the system), with
// pgregory.net/rapid drawing the cases and shrinking the failures.
//
// A Spec names the handler: a rapid generator of its messages, how a
// message becomes an oncekv.Request (its idempotency key comes from the
// message), its effect (or Open, to build it on each store), and the state
// to compare (Snapshot; by default Buckets, every user bucket).
//
// Check applies a random S once each, in order, to a fresh store: the
// reference. On another fresh store it delivers every message of S 1 to
// MaxCopies times, the copies interleaved and moved up to Reorder places
// later, with faults at the effect's boundary: an attempt whose effect ran
// and then rolled back (a crash before the commit), and a commit followed
// by a crash before the ack (the effect's OnCommit hooks do not run); the
// message is then delivered again. The two final states must be equal.
// When they are not, the failure shows the smallest case found (rapid's
// shrinking, then oncekvtest's own reduction: messages, copies, faults and
// moves taken away while the states still differ), what each delivery
// did, the entries the states disagree on, and the likely cause, found by
// running variants of the case: an idempotency key that changes between
// deliveries, a state that is not deterministic or depends on the store's
// clock or on the messages' order, an effect that rolled back and left a
// trace, work lost by a crash after a commit.
//
// CheckCrash is the same with real crashes: the test binary re-runs the
// calling test as a child process that SIGKILLs itself where Check would
// inject a fault (inside an effect, before its commit; right after a
// commit, before the ack) and is restarted, with a fresh handler on the
// same store, until every delivery is acked. It catches what only a dead
// process shows: work kept in memory, a start-up recovery that is not
// idempotent. Its messages travel to the child as JSON.
//
// The two runs' clocks differ on purpose (Spec.ClockSkew): a handler that
// stores a reading of the clock (Tx.Now, time.Now, a queue's enqueue
// time) is flagged. Store the message's own time instead, or leave that
// field out of the Snapshot.
//
// A handler that passes is idempotent under what the checker delivers:
// duplicates, reordering within the bound, rolled-back attempts and
// crashes at the effect's boundary, for the cases it drew. It says nothing
// of effects the Snapshot does not see (an e-mail, a payment gateway):
// those need Claim and a far side that deduplicates on the key.
//
// Every run's store is fresh, in a directory of the test's (in memory,
// under /dev/shm, where the system has it), opened with Options.NoSync
// and no background expiry.
package oncekvtest
