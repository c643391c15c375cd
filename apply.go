package oncekv

import (
	"bytes"
	"context"
	"runtime"
	"time"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/dupcache"
	"github.com/oncekv/oncekv/internal/layout"
)

// Apply runs effect once per (req.Handler, req.Key) within the dedup window
// (Options.Retention): on the first delivery effect's writes commit with a
// DONE mark holding its response, and every later delivery gets that
// response back with Duplicate set, without running effect. A nil effect
// records the mark only.
//
// An effect error rolls back and records nothing; one wrapped with
// Permanent records the key FAILED, answered with a *FailedError. A panic
// or runtime.Goexit of effect (or of its error's methods) records nothing
// and is raised again in the caller.
//
// Errors, each in a *RequestError: ErrKeyReuse, ErrInProgress (an
// *InProgressError), ErrResponseTooLarge, ctx's error (nothing applied),
// a failed commit's (ErrPoisoned, ErrNoSpace), ErrReadOnly, ErrClosed, and
// the bad input errors (ErrHandlerRequired, ErrKeyRequired, ErrKeyTooLarge,
// ErrInvalidFingerprint).
//
// Concurrent calls share commits, so effect may run on another goroutine
// and more than once; only the run that commits leaves changes, so effect
// must change nothing outside tx, and must not write through the DB
// (it would wait for the write lock its own commit holds; see
// docs/design/group-commit.md). Use Tx.Mark to record another key.
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
	res, read, checkFrom, err := db.applyFromSnapshot(ctx, &req, &buf)
	if read == readAnswered {
		return res, err
	}
	r := req // the op may outlive this frame's use of req: it goes on the heap, req stays on the stack
	o, err := db.newOp(ctx, &r, effect)
	if err != nil {
		db.stats.count(req.Handler, outcomeInvalid)
		return Result{}, requestError("apply", &req, err)
	}
	switch {
	case read == readAbsent:
		o.checkFrom = checkFrom // the snapshot looked already
		db.group.submit(o)
	case !db.answerFromSnapshot([]*op{o}):
		db.group.submit(o)
	}
	return db.finish(o)
}

// ApplyBatch applies reqs in one write transaction (one fsync), calling
// effect with the request's index on the caller's goroutine. Each request
// gets the result Apply would give it: duplicates, also within the batch,
// skip effect, and an effect error rolls back that request only, at the
// cost of one more commit (docs/design/group-commit.md). A panic of effect
// is raised once the other requests are committed; a runtime.Goexit rolls
// back the transaction in progress.
//
// The error is non-nil only when the batch as a whole failed (ErrClosed,
// ctx done before the write lock, a failed commit); no request that
// carries an error was applied.
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

// answerFromSnapshot is the duplicate fast path: it answers from the cache,
// else from one read transaction, every op whose key has a final mark or a
// live claim, and reports whether all were. An op left over remembers the
// sealed windows it found empty (op.checkFrom).
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
	// Every window older than the newest was sealed before the snapshot, so
	// the snapshot holds all its marks (docs/design/windows-and-filters.md).
	// A shared snapshot may be older than live, but no commit began since it
	// was opened (docs/design/duplicate-reads.md).
	live := db.live.Windows()
	sealedBelow := sealedBelowOf(live)
	if len(ops) == 1 && !db.mayHaveMark(live, ops[0].mhash) {
		ops[0].checkFrom = sealedBelow
		return false // certainly unseen: no need for a read transaction
	}
	all := true
	var sn *snapshot
	err := db.guard(func() error {
		var err error
		if sn, err = db.acquireSnapshot(); err != nil {
			return err
		}
		var now time.Time // read once, and only for a claim: a final mark needs no time
		for _, o := range ops {
			if o.settled {
				continue
			}
			var counts lookupCounts
			var found layout.FoundMark
			ok, err := db.findInSnapshot(sn, live, o.mkey, o.mhash, &found, &counts)
			db.addLookupCounts(counts)
			var m *layout.FoundMark
			if ok && err == nil {
				m = db.releaseOrphan(&found)
			}
			if m != nil && m.State == layout.InProgress && now.IsZero() {
				now = db.clock.read()
			}
			switch {
			case err != nil:
				o.fail(outcomeAborted, err)
			case m != nil && o.answer(m, now):
				db.offer(sn.epoch, o, m)
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
	if sn != nil {
		if err != nil {
			_ = sn.btx.Rollback() // not handed back: it may have met a damaged page
		} else {
			db.releaseSnapshot(sn)
		}
	}
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

// finish settles a single Apply's op and raises again, in the caller's
// goroutine, a panic or runtime.Goexit of its effect.
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
	if o.kind == outcomeApplied || o.kind == outcomeFailedRecorded {
		db.noteIfLate(o.ctx, o.req.Handler, o.req.Key, o.mhash)
	}
	return db.settleOutcome(o.ctx, o.req.Handler, o.req.Key, o.kind, o.res, o.err)
}

// settleOutcome is settle given the op's parts, so that applyFromCache's
// op stays on the stack.
func (db *DB) settleOutcome(ctx context.Context, handler, key string, kind outcome, res Result, err error) (Result, error) {
	if kind == outcomeDuplicate || kind == outcomeFailedReplayed {
		db.noteDuplicate(ctx, handler, key, kind, &res) // counts kind too
	} else {
		db.stats.count(handler, kind)
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
// can, allocating only the response's copy, and reports whether it did;
// anything else, bad input included, goes the ordinary way.
func (db *DB) applyFromCache(ctx context.Context, req *Request, buf *[cachedKeySize]byte) (Result, bool, error) {
	if req.Handler == "" || req.Key == "" || len(req.Handler)+len(req.Key) > len(buf)-2 {
		return Result{}, false, nil
	}
	mkey := layout.AppendMarkKey(buf[:0], req.Handler, req.Key)
	e := db.dups.Get(bloom.Sum64(mkey), mkey)
	if e == nil || e.Found.Window < db.live.Floor() {
		return Result{}, false, nil
	}
	// Only what answer reads: pointers in o would escape to the heap.
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
