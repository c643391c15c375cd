package oncekv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
)

// Request is one delivery of a logical operation.
type Request struct {
	// Handler names the operation or consumer. Dedup is scoped to
	// (Handler, Key): one event id may legitimately be processed by several
	// handlers. Required.
	Handler string
	// Key is the idempotency key: created once by the caller when the
	// intent was formed, and reused by every retry. Required. Handler and
	// Key together must fit in 32766 bytes.
	Key string
	// Payload is the operation's content. The first 16 bytes of its
	// SHA-256 are stored with the mark, and a later request with the same
	// key and another payload is rejected with ErrKeyReuse.
	Payload []byte
	// Fingerprint, when not empty, is what identifies the operation's
	// content instead of the Payload's bytes: its hash is stored in place
	// of the Payload's, and a later request of the key is a duplicate when
	// its Fingerprint is the same, whatever its Payload, and key reuse
	// when it differs. Give one when the same content can arrive as other
	// bytes: a producer that re-encodes JSON with its fields in another
	// order, or a payload with a timestamp of the send. It is typically a
	// hash of the fields that matter, or of a canonical encoding. Every
	// delivery of a key must then carry one: a request without it is
	// compared by its Payload's hash, which never equals a Fingerprint's.
	// At most MaxFingerprintSize bytes (ErrInvalidFingerprint).
	Fingerprint []byte
}

// Result is the outcome of an applied or deduplicated request.
type Result struct {
	// Response is what the effect returned when it first ran; every
	// duplicate gets the same bytes back. nil and empty stay distinct. It
	// is the caller's to keep and modify.
	Response []byte
	// Duplicate is true when the key had been applied before and the effect
	// did not run this time.
	Duplicate bool
	// FirstSeen is when the mark was first written.
	FirstSeen time.Time
}

// Apply applies req's effect once per (req.Handler, req.Key) within the
// dedup window (Options.Retention): effectively once, since the effect may
// run more than once but only one run ever commits (see below).
//
// On the first delivery, effect runs in a write transaction on the user
// buckets, and its changes commit together with a DONE mark holding the
// response it returned: a crash leaves both or neither. Later deliveries of
// the same key and payload get that response back with Duplicate set,
// without running effect, from a read transaction that takes no write lock
// and no fsync, or from a bounded cache of the final marks written or read
// recently, which every write that replaces or deletes a mark (Forget,
// LoadMarks, expiry) keeps truthful.
//
// If effect returns an error, everything it did is rolled back and nothing is
// recorded, so a retry runs it again. If the error is wrapped with
// Permanent, the effect's writes are rolled back but the key is recorded as
// FAILED, and this call and every duplicate return a *FailedError.
//
// If effect panics, or an error it returned panics when oncekv inspects it
// (its Error, or errors.As while looking for Permanent), nothing is
// recorded and Apply raises the panic again in its caller's goroutine. If
// effect calls runtime.Goexit (as t.FailNow does), nothing is recorded and
// Apply's caller exits too, as Goexit demands. Either way the store, and
// the other calls sharing the commit, carry on unharmed.
//
// Errors: ErrKeyReuse when the key was first used with another payload (or
// Fingerprint); ErrInProgress, as an *InProgressError saying when the lease
// ends, when a live claim holds the key; ErrResponseTooLarge when the
// response is larger than a mark can hold; ctx's error when ctx was done
// before the commit, including while the call waited for the write lock
// (nothing applied); ErrReadOnly for a key not done yet in a read-only
// store; ErrClosed after Close; and bad input errors (ErrHandlerRequired,
// ErrKeyRequired, ErrKeyTooLarge, ErrInvalidFingerprint). Each comes
// wrapped in a *RequestError naming the handler and key. Classify says what
// to do about each.
//
// Concurrent Apply calls share commits (group commit), so durable throughput
// is not one fsync per call. When its commit is shared, the effect runs on a
// goroutine of oncekv's, not the caller's, since that commit may be led by
// another caller; a call that commits alone runs it on its own goroutine.
// The price, as with bbolt's Batch: when another call's effect in the same
// commit fails, the transaction rolls back, and the effects that ran before
// the failure run once more in a fresh transaction that commits without
// it, so effect may run more than once. Only the run that commits leaves
// changes, so effect must change nothing outside tx. A nil effect records
// the mark only, with a nil response.
//
// effect must not write through the DB itself (Apply, ApplyBatch, Claim,
// Update, Forget, ...): the commit running it holds the write lock such a
// call waits for, so a call with a context waits until that context ends,
// and one without waits forever (as Close does, which waits for this very
// call). A duplicate is answered without the lock, but a new key is not. To
// record another key in the same transaction, use Tx.Mark.
func (db *DB) Apply(ctx context.Context, req Request, effect func(tx *Tx) ([]byte, error)) (Result, error) {
	if !db.life.enter() {
		return Result{}, ErrClosed
	}
	defer db.life.exit()
	if err := ctx.Err(); err != nil {
		db.stats.count(req.Handler, outcomeAborted)
		return Result{}, requestError("apply", &req, err)
	}
	var buf [cachedKeySize]byte
	if res, ok, err := db.applyFromCache(ctx, &req, &buf); ok {
		return res, err
	}
	r := req // the op may outlive this frame's use of req: it goes on the heap, req stays on the stack
	o, err := db.newOp(ctx, &r, effect)
	if err != nil {
		db.stats.count(req.Handler, outcomeInvalid)
		return Result{}, requestError("apply", &req, err)
	}
	if !db.answerFromSnapshot([]*op{o}) {
		db.group.submit(o)
	}
	return db.finish(o)
}

// BatchResult is the outcome of one request of ApplyBatch.
type BatchResult struct {
	Result
	Err error // this request's error, as Apply would have returned it
}

// ApplyBatch applies many requests in one write transaction, the way a
// consumer handles one poll of a few hundred messages: one commit, one
// fsync, for the whole batch. effect is called with the index into reqs of
// the request to apply. Each request gets its own result, exactly as Apply
// would give it: duplicates (also within the batch) are answered without
// running effect, bad requests get their error, and an effect error rolls
// back that request only.
//
// Since bbolt cannot roll back part of a transaction, an effect error costs
// one more commit: the requests before it run again in a fresh transaction
// that commits without it, and the requests after it go on in the next.
// So each effect runs at most twice (when effects are deterministic), plus
// once per failure, however many requests fail.
//
// effect runs on the caller's goroutine. If it panics, the other requests
// are settled and committed first, then ApplyBatch raises the panic again;
// if it calls runtime.Goexit, the caller exits at once, and the transaction
// in progress rolls back (requests committed before it stay committed).
//
// The returned error is non-nil only when the batch as a whole failed:
// the DB is closed, ctx ended before the batch took the write lock (each
// request not answered from its mark then carries ctx's error too), or a
// commit failed. No request that carries an error was applied.
func (db *DB) ApplyBatch(ctx context.Context, reqs []Request, effect func(tx *Tx, i int) ([]byte, error)) ([]BatchResult, error) {
	if !db.life.enter() {
		return nil, ErrClosed
	}
	defer db.life.exit()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	results := make([]BatchResult, len(reqs))
	ops := make([]*op, 0, len(reqs))
	for i := range reqs {
		var fn func(*Tx) ([]byte, error)
		if effect != nil {
			fn = func(tx *Tx) ([]byte, error) { return effect(tx, i) }
		}
		o, err := db.newOp(ctx, &reqs[i], fn)
		if err != nil {
			db.stats.count(reqs[i].Handler, outcomeInvalid)
			results[i].Err = requestError("apply", &reqs[i], err)
			continue
		}
		o.index = i
		ops = append(ops, o)
	}
	db.answerFromSnapshot(ops)
	var pending []*op
	for _, o := range ops {
		if !o.settled {
			pending = append(pending, o)
		}
	}
	var commitErr error
	if len(pending) > 0 {
		commitErr = db.commitBatch(ctx, pending)
	}
	var panicked *op
	for _, o := range ops {
		if o.panicVal != nil && panicked == nil {
			panicked = o
		}
		results[o.index].Result, results[o.index].Err = db.settle(o)
	}
	if panicked != nil {
		panic(panicked.panicVal)
	}
	return results, commitErr
}

// commitBatch takes the write lock, or gives up with ctx's error, and
// commits ops.
func (db *DB) commitBatch(ctx context.Context, ops []*op) error {
	if err := db.writeMu.LockContext(ctx); err != nil {
		for _, o := range ops {
			o.fail(outcomeAborted, err)
			o.settled = true
		}
		return err
	}
	defer db.writeMu.Unlock()
	return db.commitOpsLocked(ops)
}

// outcome classifies a request's end for the counters.
type outcome uint8

const (
	outcomeNone outcome = iota
	outcomeApplied
	outcomeDuplicate
	outcomeKeyReuse
	outcomeInProgress
	outcomeFailedRecorded
	outcomeFailedReplayed
	outcomeEffectError
	outcomeInvalid
	outcomeAborted // ctx done, commit failed, database problem
	outcomeFenced  // a claim operation by a worker that was taken over
	outcomeCount   // the number of outcomes; keep last
)

// op is one request on its way through Apply or ApplyBatch.
type op struct {
	ctx    context.Context
	req    *Request
	mkey   []byte
	mhash  uint64 // bloom.Sum64(mkey): hashed once for the filters, the cache and the write path
	hash   [layout.HashSize]byte
	effect func(*Tx) ([]byte, error)
	index  int // position in ApplyBatch's reqs

	// The outcome. Until the transaction that decided it commits, it is
	// tentative; settled means it no longer depends on any commit.
	res     Result
	err     error
	kind    outcome
	settled bool
	// panicVal is the panic of the effect (or of its error's methods),
	// and goexit is set when the effect called runtime.Goexit; both are
	// raised again in the op's own caller.
	panicVal any
	goexit   bool
	// hooks are the OnCommit hooks its effect registered, in the attempt
	// that committed when kind is outcomeApplied.
	hooks []func()
	// checkFrom is the start of the oldest window the write path must look
	// in; older ones were sealed and found empty of this key by the
	// snapshot (see findMarkFrom).
	checkFrom int64
	// failWith is a permanent error to record as FAILED, with the message
	// failMsg, without running the effect, in the next attempt at the
	// transaction.
	failWith error
	failMsg  string
	// counts are what deciding the op moved in its last attempt.
	counts lookupCounts

	// wake carries true when the outcome is ready, false when the op's
	// goroutine is promoted to lead the next group commit. Only ops that
	// queued in the group commit have one.
	wake chan bool
	// detached: the effect runs on another goroutine than the one deciding
	// o, because that one is not o's caller's, or decides other callers'
	// ops in the same transaction (see runEffect).
	detached bool
	// step, when not nil, makes o a claim's write (take, Extend, Complete,
	// Fail) riding the group commit: decideOne runs it in place of Apply's
	// logic (see decideStep).
	step func(w *writeTx) error
}

func (db *DB) newOp(ctx context.Context, req *Request, effect func(*Tx) ([]byte, error)) (*op, error) {
	mkey, err := markKey(req)
	if err != nil {
		return nil, err
	}
	hash, err := fingerprint(req)
	if err != nil {
		return nil, err
	}
	return &op{
		ctx:   ctx,
		req:   req,
		mkey:  mkey,
		mhash: bloom.Sum64(mkey),
		hash:  hash,
		// Until a snapshot has looked, every window must be read.
		checkFrom: math.MinInt64,
		effect:    effect,
	}, nil
}

// answerFromSnapshot answers, from the cache of final marks or else from
// one read transaction, every op whose key already has a final mark (or a
// live claim). This is the duplicate fast path: no write lock, no fsync. It
// reports whether all ops were answered.
//
// An op left unanswered remembers which windows it has looked in and found
// sealed, so that its write path need not look there again (findMarkFrom).
func (db *DB) answerFromSnapshot(ops []*op) bool {
	pending := 0
	for _, o := range ops {
		if db.answerFromCache(o) {
			o.settled = true
		} else {
			pending++
		}
	}
	if pending == 0 {
		return true
	}
	// Read the window list before the snapshot: every window older than
	// its newest was sealed by then, so the snapshot holds all its marks.
	// The snapshot looks in these windows only: one created since holds
	// only marks written since, which the write path looks for anyway.
	live := db.windows.Windows()
	sealedBelow := int64(math.MinInt64)
	if len(live) > 0 {
		sealedBelow = live[len(live)-1].Start
	}
	if len(ops) == 1 && !db.mayHaveMark(live, ops[0].mhash) {
		ops[0].checkFrom = sealedBelow
		return false // certainly unseen: no need for a read transaction
	}
	epoch := db.dups.Epoch() // before the snapshot: see dupcache
	all := true
	err := db.guard(func() error {
		return db.bolt.View(func(btx *bolt.Tx) error {
			var now time.Time // read once, and only for a claim: a final mark needs no time
			for _, o := range ops {
				if o.settled {
					continue
				}
				m, err := db.lookIn(btx, live, o.mkey, o.mhash, math.MinInt64)
				if m != nil && m.State == layout.InProgress && now.IsZero() {
					now = db.clock.read()
				}
				switch {
				case err != nil:
					o.fail(outcomeAborted, err)
				case m != nil && o.answer(m, now):
					db.offer(epoch, o, m)
				default:
					if m == nil {
						o.checkFrom = sealedBelow
					}
					all = false
					continue
				}
				o.settled = true
			}
			return nil
		})
	})
	if err != nil {
		for _, o := range ops {
			if !o.settled {
				o.fail(outcomeAborted, err)
				o.settled = true
			}
		}
		return true
	}
	return all
}

// answer sets o's outcome from an existing mark, and reports false when the
// mark does not decide it (an expired claim, which the request may take
// over).
func (o *op) answer(m *layout.FoundMark, now time.Time) bool {
	if m.PayloadHash != o.hash {
		o.fail(outcomeKeyReuse, ErrKeyReuse)
		return true
	}
	switch m.State {
	case layout.Done:
		o.res = Result{Response: m.Response, Duplicate: true, FirstSeen: timeFromNano(m.FirstSeen)}
		o.err, o.kind = nil, outcomeDuplicate
	case layout.Failed:
		o.res = Result{Duplicate: true, FirstSeen: timeFromNano(m.FirstSeen)}
		o.err, o.kind = &FailedError{Message: m.Error}, outcomeFailedReplayed
	case layout.InProgress:
		if now.UnixNano() >= m.LeaseUntil {
			return false
		}
		o.fail(outcomeInProgress, &InProgressError{until: timeFromNano(m.LeaseUntil)})
	}
	return true
}

func (o *op) fail(kind outcome, err error) {
	o.res, o.err, o.kind = Result{}, err, kind
}

// finish waits for nothing: it settles a single Apply's op and re-raises a
// panic or a runtime.Goexit of its effect in the caller's goroutine, where
// it belongs.
func (db *DB) finish(o *op) (Result, error) {
	res, err := db.settle(o)
	if o.panicVal != nil {
		panic(o.panicVal)
	}
	if o.goexit {
		runtime.Goexit()
	}
	return res, err
}

// settle counts and logs o's outcome and returns it as the caller sees it.
func (db *DB) settle(o *op) (Result, error) {
	if o.kind == outcomeApplied {
		defer runHooks(o.hooks)
	}
	return db.settleOutcome(o.ctx, o.req.Handler, o.req.Key, o.kind, o.res, o.err)
}

// settleOutcome is settle given the parts of the op it reads, so that an
// op on the duplicate cache's path (applyFromCache) stays on the stack.
func (db *DB) settleOutcome(ctx context.Context, handler, key string, kind outcome, res Result, err error) (Result, error) {
	db.stats.count(handler, kind)
	if kind == outcomeDuplicate && db.log.Enabled(ctx, slog.LevelInfo) {
		db.log.LogAttrs(ctx, slog.LevelInfo, "duplicate suppressed",
			slog.String("handler", handler),
			slog.String("key", key),
			slog.Duration("age", db.clock.last().Sub(res.FirstSeen)))
	}
	if err == nil {
		return res, nil
	}
	return res, requestError("apply", &Request{Handler: handler, Key: key}, err)
}

// errRetry rolls back a transaction of commitOpsLocked because one of its
// ops failed; the transaction runs again without that op's writes.
var errRetry = errors.New("oncekv: roll back the ops' transaction and run it again")

// errGoexit is the outcome of an op whose effect called runtime.Goexit. Its
// caller never sees it: finish ends the caller's goroutine instead.
var errGoexit = errors.New("oncekv: effect called runtime.Goexit")

// MaxResponseSize is the largest response a mark can hold, with the message
// of a permanent error counted in: bbolt's value limit, less room for the
// rest of the mark. A larger one fails its request with ErrResponseTooLarge.
const MaxResponseSize = bolt.MaxValueSize - markOverhead

// markOverhead bounds what a mark's record takes besides its response and
// error message: the record header and checksum, the state, the payload
// hash, three integers and the msgpack headers (under 100 bytes today).
const markOverhead = 1 << 10

// checkResponse returns ErrResponseTooLarge, naming both sizes, when n
// bytes of response (and error message) do not fit in a mark. It is
// checked before a mark is written, so the one request fails instead of
// the bbolt transaction that every request of its commit shares.
func (db *DB) checkResponse(n int) error {
	if n > db.maxResponse {
		return fmt.Errorf("%w: %d bytes, more than the limit of %d", ErrResponseTooLarge, n, db.maxResponse)
	}
	return nil
}

// commitOpsLocked decides ops, in order, commits them and settles every
// one. The caller holds writeMu.
//
// bbolt has no savepoints: when an op fails (its effect returned an error,
// panicked or called runtime.Goexit; its mark would be too large), the
// only way to undo what it wrote is to roll the whole transaction back. The
// ops before it did nothing wrong, so they run again in a fresh transaction
// that commits without it (or with its FAILED mark only, for a permanent
// error), and the ops after it go on in the next transaction. An op's
// effect therefore runs at most twice when effects are deterministic, and
// the work stays O(n) whatever fails, at the price of one more commit per
// failure: "one effect, one mark, one commit" holds for every op.
//
// It returns the error of a commit that failed; every op not settled by
// then carries it.
func (db *DB) commitOpsLocked(ops []*op) error {
	start, end := 0, len(ops)
	for start < len(ops) {
		failed := -1
		err := db.writeLocked(func(w *writeTx) (err error) {
			failed, err = db.decide(w, ops[start:end])
			return err
		})
		switch {
		case err == nil:
			for _, o := range ops[start:end] {
				o.settled = true
			}
			start, end = end, len(ops)
		case failed >= 0:
			k := start + failed
			o := ops[k]
			switch {
			case !o.settled:
				// A permanent error: its FAILED mark commits with the ops
				// before it. Its effect does not run again, so the writes
				// it had refused are counted now; its look-ups are counted
				// with the commit.
				db.stats.fencedWrites.Add(o.counts.fenced)
				end = k + 1
			case k == start:
				db.stats.addCounts(o.counts)
				start, end = k+1, len(ops)
			default:
				db.stats.addCounts(o.counts)
				end = k // commit the ops before it; the next round starts after it
			}
		default:
			cerr := err
			if !errors.Is(err, ErrPoisoned) && !errors.Is(err, ErrNoSpace) {
				cerr = fmt.Errorf("oncekv: commit: %w", err) // those two say so already
			}
			for _, o := range ops[start:] {
				if !o.settled {
					o.fail(outcomeAborted, cerr)
					o.settled = true
				}
			}
			return err
		}
	}
	return nil
}

// decide runs the ops not yet settled, in order, inside one write
// transaction. Outcomes it sets stay tentative until the commit; settled
// ones are final either way. When an op fails in a way that needs its
// writes undone, decide stops and returns its index with errRetry.
func (db *DB) decide(w *writeTx, ops []*op) (int, error) {
	for i, o := range ops {
		if o.settled {
			continue
		}
		before := w.counts()
		undo := db.decideOne(w, o)
		o.counts = w.counts().sub(before)
		if undo {
			return i, errRetry
		}
	}
	return -1, nil
}

// decideOne decides o in w. It reports true when o failed after writing
// (or possibly writing) something that must be rolled back: o is then
// settled, or holds the permanent error to record in the next attempt.
func (db *DB) decideOne(w *writeTx, o *op) (undo bool) {
	if o.step != nil {
		return decideStep(w, o)
	}
	o.res, o.err, o.kind = Result{}, nil, outcomeNone
	if err := o.ctx.Err(); err != nil {
		o.fail(outcomeAborted, err)
		o.settled = true
		return false
	}
	// Look again under the write lock: a concurrent group, or an earlier
	// op of this one, may have written the mark since the snapshot.
	found, err := db.findMarkFrom(w.btx, o.mkey, o.mhash, o.checkFrom)
	if err != nil {
		o.fail(outcomeAborted, err)
		o.settled = true
		return false
	}
	if found != nil && o.answer(found, w.now) {
		return false
	}
	mark := layout.Mark{PayloadHash: o.hash, FirstSeen: w.now.UnixNano()}
	if found != nil {
		// Taking over an expired claim: the mark keeps its first-seen time
		// (rewriteMark decides its window), and takes a token greater than
		// the claim's, so the holder's late Complete gets a *FenceError
		// with both.
		mark.FirstSeen = found.FirstSeen
		if mark.Token, err = layout.NextClaimToken(w.btx); err != nil {
			o.fail(outcomeAborted, err)
			o.settled = true
			return true
		}
	}
	if o.failWith != nil {
		mark.State, mark.Error = layout.Failed, o.failMsg
		o.res, o.err, o.kind = Result{}, &FailedError{Message: o.failMsg, cause: o.failWith}, outcomeFailedRecorded
	} else {
		db.crashAt(crashBeforeEffect)
		r := runEffect(w.tx, o)
		switch {
		case o.panicVal != nil:
			o.kind, o.settled = outcomeEffectError, true
			return true
		case o.goexit:
			o.fail(outcomeEffectError, errGoexit)
			o.settled = true
			return true
		case r.permanent:
			o.failWith, o.failMsg = r.err, r.msg
			return true
		case r.err != nil && o.ctx.Err() != nil:
			// The context ended during the effect: whatever the effect
			// made of it, the request was aborted (Stats.Aborted), and the
			// caller gets the effect's own error.
			o.fail(outcomeAborted, r.err)
			o.settled = true
			return true
		case r.err != nil:
			o.fail(outcomeEffectError, r.err)
			o.settled = true
			return true
		case o.ctx.Err() != nil:
			// Done during the effect: apply nothing.
			o.fail(outcomeAborted, o.ctx.Err())
			o.settled = true
			return true
		}
		db.crashAt(crashAfterEffect)
		mark.State, mark.Response = layout.Done, r.resp
		o.res, o.kind = Result{Response: r.resp}, outcomeApplied
	}
	if err := db.checkResponse(len(mark.Response) + len(mark.Error)); err != nil {
		o.fail(outcomeEffectError, err)
		o.settled = true
		return true
	}
	o.res.FirstSeen = timeFromNano(mark.FirstSeen)
	if found != nil {
		_, err = w.rewriteMark(found.Window, o.mkey, &mark)
	} else {
		err = w.putMark(db.placeMark(w.now), o.mkey, &mark)
	}
	if err != nil {
		o.fail(outcomeAborted, fmt.Errorf("oncekv: write mark: %w", err))
		o.settled = true
		return true
	}
	return false
}

// effectResult is what an effect returned, and what oncekv learned by
// looking into its error.
type effectResult struct {
	resp      []byte // a copy: the effect may return a slice of a bucket value
	err       error
	permanent bool   // err was marked with Permanent
	msg       string // err's message, for a permanent error's FAILED mark
}

// runEffect calls o's effect in tx. Everything that calls into the values
// the effect returned (the error's As and Is methods while looking for
// Permanent, its Error for the message) happens in the same guarded call:
// a panic there is the effect's caller's, recorded in o.panicVal and raised
// again in its goroutine by finish, never taken for a fault of the store.
//
// The effect of a detached op (one of several in a group commit) may
// belong to another caller than the one leading the commit, so it runs on
// a goroutine of its own: a runtime.Goexit in it ends that goroutine only,
// and is recorded in o.goexit for finish to repeat in the caller's
// goroutine. Any other effect is the deciding goroutine's own (an
// ApplyBatch's, or a group leader's committing its op alone) and runs on
// it: a runtime.Goexit there unwinds the transaction, rolling it back, and
// ends the caller, who alone waited for it.
func runEffect(tx *Tx, o *op) effectResult {
	o.hooks = nil // an earlier attempt's hooks were rolled back with it
	if o.effect == nil {
		return effectResult{}
	}
	tx.w.owner = o
	defer func() { tx.w.owner = nil }()
	if o.detached {
		return runDetached(tx, o)
	}
	var r effectResult // on the stack: only runDetached's escapes
	defer func() {
		if o.goexit {
			// runtime.Goexit is ending this goroutine, the caller's, before
			// finish (or commitStep, for Complete's effect) could count the
			// request: count it as they would for a detached effect.
			tx.w.db.stats.count(o.req.Handler, outcomeEffectError)
		}
	}()
	callEffect(tx, o, &r)
	return r
}

// runDetached is runEffect's call of a detached op's effect, on a
// goroutine of its own.
func runDetached(tx *Tx, o *op) (r effectResult) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		// As on the caller's goroutine (see guard): a fault reading a
		// damaged page in the effect is a panic, not the process's death.
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		callEffect(tx, o, &r)
	}()
	<-done
	return r
}

// callEffect runs the effect and looks into what it returned, recording in
// o a panic or a runtime.Goexit on the way (told apart by the deferred
// check: recover returns nil during a Goexit).
func callEffect(tx *Tx, o *op, r *effectResult) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if p := recover(); p != nil {
			// The value is kept as it was, so a caller's recover sees its
			// own panic; the stack of the goroutine that ran it is lost.
			o.panicVal = p
		} else {
			o.goexit = true
		}
	}()
	resp, err := o.effect(tx)
	if err != nil {
		r.err, r.permanent = err, IsPermanent(err)
		if r.permanent {
			r.msg = err.Error()
		}
	}
	if resp != nil {
		r.resp = append(make([]byte, 0, len(resp)), resp...)
	}
	returned = true
}
