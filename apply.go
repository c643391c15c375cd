package oncekv

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"runtime"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/dupcache"
	"github.com/oncekv/oncekv/internal/layout"
)

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
	live := db.live.Windows()
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

// cachedKeySize is the room Apply keeps on its stack for a mark key: a
// longer one is never cached (see dupcache.MaxEntryBytes).
const cachedKeySize = dupcache.MaxEntryBytes

// applyFromCache answers a single Apply from the duplicate cache when it
// can, and reports whether it did. Its one allocation is the copy of the
// response: the mark key is built in buf, the op lives on the stack, and
// the payload is hashed only when it is not the one the cached mark was
// confirmed with. A request it cannot answer, bad input included, goes the
// ordinary way.
func (db *DB) applyFromCache(ctx context.Context, req *Request, buf *[cachedKeySize]byte) (Result, bool, error) {
	if req.Handler == "" || req.Key == "" || len(req.Handler)+len(req.Key) > len(buf)-2 {
		return Result{}, false, nil
	}
	mkey := layout.AppendMarkKey(buf[:0], req.Handler, req.Key)
	e := db.dups.Get(bloom.Sum64(mkey), mkey)
	if e == nil || e.Found.Window < db.live.Floor() {
		return Result{}, false, nil
	}
	// Only what answer reads: an op that held pointers (the key in buf,
	// req) would move them to the heap along with the error it carries.
	var o op
	if e.HasPayload && len(req.Fingerprint) == 0 && bytes.Equal(req.Payload, e.Payload) {
		o.hash = e.Found.PayloadHash
	} else {
		var err error
		if o.hash, err = fingerprint(req); err != nil {
			return Result{}, false, nil
		}
		if !e.HasPayload && len(req.Fingerprint) == 0 && o.hash == e.Found.PayloadHash && dupcache.Fits(e.MKey, &e.Found.Mark, len(req.Payload)) {
			db.dups.AddPayload(e, req.Payload)
		}
	}
	m := e.Found
	m.Response = bytes.Clone(m.Response) // the caller's to modify; the entry's stays
	o.answer(&m, time.Time{})            // final: the time does not matter
	res, err := db.settleOutcome(ctx, req.Handler, req.Key, o.kind, o.res, o.err)
	return res, true, err
}
