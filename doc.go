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
//   - Effectively-once processing, not exactly-once delivery: deliveries may
//     repeat, and the effect of each (handler, key) is applied once within
//     the dedup window.
//   - The effect's writes and the DONE mark commit in one transaction: after
//     a crash at any instant, both are there or neither is.
//   - A duplicate gets the stored response, byte for byte, and Duplicate set.
//     It is served from a read transaction, or from a bounded cache of
//     final marks that a forget, an expiry or a load invalidates before it
//     becomes visible: no write lock, no fsync.
//   - The same key with another payload is rejected with ErrKeyReuse; the
//     store does not change. "Another payload" means other bytes, unless
//     the request carries a Request.Fingerprint, which is compared instead
//     (for a producer that re-encodes the same content differently).
//   - An effect error rolls everything back and records nothing, so a retry
//     runs again; an error wrapped with Permanent is recorded as FAILED and
//     replayed to every duplicate.
//   - A context that is done before the commit applies nothing.
//   - Unless Options.NoSync is set, Apply returns only after the commit is on
//     disk (bbolt's fdatasync).
//   - Marks are kept for at least Options.Retention (the one in force)
//     after they were first seen, across any change of options. They live
//     in time windows of Options.WindowSpan that expire whole (DB.Expire,
//     and in the background), so the cost of expiry grows with what
//     expires, never with what is live. A file keeps the WindowSpan it was
//     created with: another one is refused with ErrInvalidOptions, and zero
//     means the file's. Retention/WindowSpan is at most MaxWindows.
//   - The Bloom filter kept per window is only a hint: "definitely not
//     seen" skips that window's look-up, and "maybe" is always confirmed by
//     the exact look-up. It learns a key only after the key's transaction
//     has committed, and it is rebuilt from the file when it cannot be
//     trusted, so it never causes a lost dedup (a false negative), not
//     after a reopen, an expiry or a crash.
//   - Bucket.PutFenced applies a write only if its fence is strictly greater
//     than the key's, inside the same transaction as the effect and the
//     mark. DB.NextFence issues fences that only grow, per resource, and
//     are never issued twice, not even after a crash. Bucket.PutIfVersion
//     is compare-and-set; every write of a key moves its version on.
//   - DB.Claim is Apply for an effect outside the store (an e-mail, a
//     payment gateway): the key is IN_PROGRESS under a lease and a fencing
//     token until Complete or Fail. Lease expiry alone frees the key of a
//     crashed worker, and a worker taken over gets ErrFenced, never a second
//     say in the result. A claim keeps its key for as long as its lease,
//     extended or not, even past Retention: expiry keeps its window until
//     the lease has ended. A claim completed (or failed for good) late is
//     deduplicated for at least Retention after its completion.
//   - A clock that steps back never revives an expired lease and never
//     drops a live mark early, across a Close or a crash: the store's
//     clock never goes back, and is saved in the file by Close, by expiry
//     and by any write once it has moved a second since last saved.
//
// # Caveats
//
//   - Dedup lasts for the window (Options.Retention, 7 days by default). A
//     retry that arrives after it is applied again; Stats.ExpiredMarks
//     counts the marks that can no longer stop one. Choose the window longer
//     than the longest a retry can be delayed: topic retention, a client's
//     retry horizon, the time to handle an incident by hand.
//   - The effect must change nothing outside its transaction. Under group
//     commit it may run more than once (when another effect in the same
//     commit fails), and only the committed run counts. An e-mail or a call
//     to a payment gateway cannot join the transaction.
//   - Dedup does not fix reordering: set(x,1) delivered after set(x,2) is
//     applied once, and wrongly. That needs versions or fencing tokens:
//     write such keys with PutFenced or PutIfVersion. Plain Put is
//     unfenced; it moves a key's version on but ignores its fence.
//   - A fence outlives its key: Delete keeps it, so a stale writer cannot
//     bring the key back, and the store never drops fence records.
//   - A claim's external effect is as idempotent as the external system
//     makes it. Pass it two values: Claim.Key as its idempotency key (the
//     same at every retry and takeover, so a call repeated after a crash
//     is recognised) and Claim.Token as a fence (greater at every
//     takeover, so a zombie's late call can be refused). Never the token as
//     the idempotency key: a worker killed between the call and Complete
//     is taken over with a new token, and the call would run twice. Within
//     its lease the holder is safe from takeover, but a lease is time, and
//     a process can pause past it; the token is what the external system
//     should trust for order.
//   - Time is Options.Now's, bounded. A forward jump over
//     Options.MaxClockJump (24h by default) is held back until three
//     readings in a row agree on it (logged at warn, counted in
//     Stats.ClockJumps), so one wild reading cannot issue a lease that ends
//     decades later or expire everything; while it is held back the
//     store's time stands still, so a mark first seen then is dated before
//     the jump and, if the jump was real, may expire that much sooner. The
//     first reading after Open is taken as is (a stopped process cannot
//     tell downtime from a jump). After a crash the store's clock resumes
//     at most a second before the last commit's reading: a lease that had
//     run out within that second, with no write since, can look live again
//     until the clock passes its end.
//   - A claim whose lease is longer than Retention keeps its window, and
//     every newer window, from expiring until the lease ends: expiry drops
//     windows oldest first. Recording a lease end costs a claim one small
//     extra write.
//   - A long View can stall a writer. bbolt maps the file into memory and
//     cannot move the map while a read transaction holds it, so the commit
//     that grows the file past the map (Options.InitialMmapSize, 1 GiB by
//     default on 64-bit platforms but Windows, then every further GiB)
//     waits for every open View, and new Views wait behind it. Below that,
//     readers never block writers. A write called from inside View's
//     function (Apply, Claim, Update, ...) works while the file fits the
//     map and deadlocks once it does not: never write from inside View.
//   - One process per file: bbolt locks it, and a second Open fails with
//     ErrLocked after Options.OpenTimeout.
//   - An I/O error in a commit (EIO, a failed fsync) poisons the DB: every
//     later write fails with ErrPoisoned until the DB is closed and
//     reopened; reads keep working. The failed request was not
//     acknowledged, and the file holds its effect and mark both or neither.
//     A full disk is the exception when it stops the commit before anything
//     of it was visible: ErrNoSpace, nothing changed, and writes resume
//     once space is freed.
//   - The idempotency key must be created once, when the intent is formed,
//     and reused by every retry. A key minted inside the retry loop defeats
//     every guarantee above, silently.
//
// # Conventions
//
// The API follows three rules, so that a call's shape says what it does:
//
//   - A call about a delivery takes the Request, which carries the payload
//     (or Fingerprint) to check against the key's first one: Apply,
//     ApplyBatch, Claim. A call about a key's mark takes the handler and the
//     key, with nothing to check: Forget, Mark, ReleaseClaim.
//   - A call that handles a delivery, or may run long, takes a context and
//     applies nothing when it is done before the commit: Apply, ApplyBatch,
//     Claim and the Claim methods, Expire. A call that is one short
//     transaction an operator or the program makes (Update, View,
//     NextFence, Forget, Mark, Claims, ReleaseClaim, Sync, Backup) takes
//     none, as bbolt's Update and View take none: its only wait is for the
//     write lock, which a context could not interrupt anyway, and a context
//     that only skipped the commit would add a way to fail, not a way to
//     stop waiting.
//   - Deleting what is not there is not an error: Forget of a key without a
//     mark, Bucket.Delete of an absent key, Tx.DeleteBucket of an absent
//     bucket (bbolt returns ErrBucketNotFound there; oncekv does not, so a
//     retried cleanup converges). Asking about what is not there is:
//     Mark and ReleaseClaim return ErrNotFound.
package oncekv
