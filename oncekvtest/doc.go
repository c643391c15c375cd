// Package oncekvtest checks that a handler on oncekv applies its effect
// once however its messages are delivered: the article's property test
// (applying a multiset S and the same S with duplicates gives the same
// final state, f(f(x)) = f(x) at the level of the system), with
// pgregory.net/rapid's shrinking to the smallest counterexample.
//
// Check applies a random S (drawn from the Spec's generator) once each, in
// order, to a fresh store: the reference. On another fresh store it
// delivers every message of S 1 to MaxCopies times, the copies interleaved
// and moved up to Reorder places later, with faults injected at the
// effect's boundary: a delivery whose effect ran and then rolled back (a
// crash before the commit), and one whose commit was followed by a crash
// before its ack (the OnCommit hooks after the store's own do not run; the
// message is delivered again). The two final states (Spec.Snapshot, by
// default every user bucket) must be equal. When they are not, the
// failure prints the smallest S and schedule rapid found, the difference
// of the states entry by entry, and the likely cause, found by running
// variants of the case: an idempotency key that changes between
// deliveries, a state that depends on the store's clock or is not
// deterministic at all, on the order of the messages, on an effect that
// rolled back or on work done after the commit.
//
// CheckCrash is the same with real crashes: the test binary re-runs the
// calling test as a child process that is SIGKILLed inside an effect and
// right after a commit, before the ack, and restarted until every
// delivery is acked; the state it leaves is compared with the reference.
// Its messages travel to the child as JSON.
//
// The two runs' clocks differ on purpose (Spec.ClockSkew): a handler that
// stores a reading of the clock (Tx.Now, time.Now) is flagged. Store the
// message's own time instead, or leave that field out of the Snapshot.
//
// A handler that passes is idempotent under what the checker delivers:
// duplicates, reordering within the bound, rolled-back attempts and
// crashes at the effect's boundary. It says nothing about effects the
// Snapshot does not see (an e-mail, a payment gateway): those need Claim
// and an idempotent far side.
package oncekvtest
