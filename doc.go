// Package oncekv is an embedded key/value store, on bbolt, for programs that
// receive messages or requests at least once (Kafka, MQTT, NATS, HTTP
// retries, a user clicking twice) and must apply each one's effect once.
//
// A program opens a DB, keeps its state in user buckets, and hands every
// delivery to Apply with the delivery's handler name and idempotency key.
// The effect, the dedup mark and (with fenced writes) the version fence
// commit in one bbolt write transaction; a later delivery of the same key is
// answered from the stored mark, with the first response, without running
// the effect again.
//
//	db, err := oncekv.Open("app.db", nil)
//	if err != nil {
//		return err
//	}
//	defer db.Close()
//	res, err := db.Apply(ctx, oncekv.Request{Handler: "deposit", Key: msg.ID, Payload: msg.Body},
//		func(tx *oncekv.Tx) ([]byte, error) {
//			b, err := tx.CreateBucketIfNotExists([]byte("balances"))
//			if err != nil {
//				return nil, err
//			}
//			// Read, add, write back: not idempotent, and it need not be.
//			balance, _ := strconv.Atoi(string(b.Get([]byte(msg.Account))))
//			balance += msg.Amount
//			return []byte("ok"), b.Put([]byte(msg.Account), strconv.AppendInt(nil, int64(balance), 10))
//		})
//	if err != nil {
//		return err
//	}
//	if res.Duplicate {
//		fmt.Println("a duplicate: the effect did not run again")
//	}
//	return nil
//
// # Guarantees
//
//   - Effectively-once, not exactly-once: deliveries may repeat; the effect
//     of each (handler, key) is applied once within the dedup window.
//   - The effect's writes and the DONE mark commit in one transaction: after
//     a crash, both are there or neither is.
//   - A duplicate gets the stored response, byte for byte, with Duplicate
//     set, without the write lock or an fsync (docs/design/duplicate-cache.md).
//   - The same key with another payload (or Request.Fingerprint) is
//     rejected with ErrKeyReuse and changes nothing.
//   - An effect error rolls everything back and records nothing; an error
//     wrapped with Permanent is recorded as FAILED and replayed.
//   - A context done before the commit applies nothing.
//   - Unless Options.NoSync is set, Apply returns once the commit is on disk.
//   - Marks are kept for at least Options.Retention after they were first
//     seen, in windows of Options.WindowSpan that expire whole, so expiry
//     costs what expires, never what is live
//     (docs/design/windows-and-filters.md).
//   - The Bloom filters are only a hint and never cause a lost dedup, not
//     after a reopen, an expiry or a crash.
//   - Bucket.PutFenced applies a write only if its fence is greater than the
//     key's; DB.NextFence issues fences that only grow, never twice.
//     Bucket.PutIfVersion is compare-and-set.
//   - DB.Claim is Apply for an effect outside the store: a lease and a
//     fencing token; a worker taken over gets ErrFenced (docs/design/claims.md).
//     DB.ClaimWith asks a Probe on every takeover whether the earlier attempt
//     applied its effect; a key it cannot settle is parked (ErrParked) until
//     DB.ResolveParked, never retried nor dropped (docs/design/probe.md).
//   - With Options.TombstoneRetention, a key past Retention keeps a
//     tombstone that still suppresses its duplicates (Result.ResponseExpired);
//     late duplicates and every duplicate's age are counted per handler
//     (DB.WindowReport, docs/design/tombstones.md).
//   - A clock that steps back never revives an expired lease nor drops a
//     live mark early, across a Close or a crash (docs/design/clock.md).
//
// # Caveats
//
//   - Dedup lasts for Options.Retention (7 days by default), or
//     TombstoneRetention from a tombstone: a retry after it is applied again
//     (counted in Counters.LateDuplicates, an estimate). Choose it longer
//     than any retry can be delayed; `oncekv advise` shows how late they come.
//   - A tombstone keeps no response and no fingerprint: a duplicate it
//     answers gets no stored response, and a reused key is not detected.
//   - A probe is as good as the external system's answer: one that cannot
//     see a call still in flight must answer OutcomeUnknown for a recent
//     attempt. Apply takes an expired claim over without a probe.
//   - The effect must change nothing outside its transaction: under group
//     commit it may run more than once (docs/design/group-commit.md).
//   - Dedup does not fix reordering: use PutFenced or PutIfVersion. Plain
//     Put ignores fences. A fence outlives its key's Delete.
//   - A claim's external effect is as idempotent as the external system:
//     hand it Claim.Key to deduplicate on and Claim.Token to fence with,
//     never the token as the key.
//   - A forward clock jump over Options.MaxClockJump is held back until
//     three readings agree (Open's own reading is taken as is); after a
//     crash the clock resumes up to a second before the last commit's
//     reading. RewindClock undoes a clock saved in the future.
//   - A claim whose lease outlasts Retention keeps its window, and every
//     newer one, until the lease ends.
//   - A long View can stall the writer that grows the file past bbolt's
//     memory map; never write from inside View (docs/design/mmap-and-readers.md).
//   - One process per file: a second Open fails with ErrLocked.
//   - An I/O error in a commit poisons the DB (ErrPoisoned) until it is
//     reopened; a full disk caught before the commit is visible is
//     ErrNoSpace, and writes resume once space is freed
//     (docs/design/poisoning-and-enospc.md).
//   - The idempotency key must be created once, with the intent, and reused
//     by every retry.
//
// # Conventions
//
//   - A call about a delivery takes the Request (Apply, ApplyBatch, Claim);
//     a call about a key's mark takes handler and key (Forget, Mark,
//     ReleaseClaim).
//   - A call that handles a delivery or may run long takes a context (Apply,
//     ApplyBatch, Claim and its methods, Expire); one short transaction
//     does not (Update, View, NextFence, Forget, Mark, Claims, ReleaseClaim,
//     Sync, Backup).
//   - Deleting what is not there is not an error (Forget, Bucket.Delete,
//     Tx.DeleteBucket); asking about it is (Mark and ReleaseClaim return
//     ErrNotFound).
package oncekv
