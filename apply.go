package oncekv

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"math"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bucket"
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
	// Payload is the operation's content. Its SHA-256 is stored with the
	// mark, and a later request with the same key and another payload is
	// rejected with ErrKeyReuse.
	Payload []byte
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

// Apply applies req's effect exactly once per (req.Handler, req.Key) within
// the dedup window (Options.Retention).
//
// On the first delivery, effect runs in a write transaction on the user
// buckets, and its changes commit together with a DONE mark holding the
// response it returned: a crash leaves both or neither. Later deliveries of
// the same key and payload get that response back with Duplicate set,
// without running effect, from a read transaction that takes no write lock
// and no fsync.
//
// If effect returns an error, everything it did is rolled back and nothing is
// recorded, so a retry runs it again. If the error is wrapped with
// Permanent, the effect's writes are rolled back but the key is recorded as
// FAILED, and this call and every duplicate return a *FailedError.
//
// Errors: ErrKeyReuse when the key was first used with another payload;
// ErrInProgress when a live claim holds the key; ctx's error when ctx was
// done before the commit (nothing applied); ErrClosed after Close; and bad
// input errors (ErrHandlerRequired, ErrKeyRequired, ErrKeyTooLarge). Each
// comes wrapped in a *RequestError naming the handler and key.
//
// Concurrent Apply calls share commits (group commit), so durable throughput
// is not one fsync per call. The price, as with bbolt's Batch: when another
// call's effect in the same group fails, the group is rolled back and run
// again without it, so effect may run more than once. Only the run that
// commits leaves changes, so effect must change nothing outside tx. A nil
// effect records the mark only, with a nil response.
func (db *DB) Apply(ctx context.Context, req Request, effect func(tx *Tx) ([]byte, error)) (Result, error) {
	if !db.life.enter() {
		return Result{}, ErrClosed
	}
	defer db.life.exit()
	if err := ctx.Err(); err != nil {
		db.stats.count(req.Handler, outcomeAborted)
		return Result{}, requestError("apply", &req, err)
	}
	o, err := db.newOp(ctx, &req, effect)
	if err != nil {
		db.stats.count(req.Handler, outcomeInvalid)
		return Result{}, requestError("apply", &req, err)
	}
	if !db.answerFromSnapshot([]*op{o}) {
		db.submit(o)
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
// back that request only. The returned error is non-nil only when the batch
// as a whole failed (closed DB, ctx done before it started, the commit
// itself failed); then no request in it was applied.
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
		db.writeMu.Lock()
		commitErr = db.commitOps(pending)
		db.writeMu.Unlock()
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
	hash   [bucket.HashSize]byte
	effect func(*Tx) ([]byte, error)
	index  int // position in ApplyBatch's reqs

	// The outcome. Until the transaction that decided it commits, it is
	// tentative; settled means it no longer depends on any commit.
	res      Result
	err      error
	kind     outcome
	settled  bool
	panicVal any
	// hooks are the OnCommit hooks its effect registered, in the attempt
	// that committed when kind is outcomeApplied.
	hooks []func()
	// checkFrom is the start of the oldest window the write path must look
	// in; older ones were sealed and found empty of this key by the
	// snapshot (see findMarkFrom).
	checkFrom int64
	// failWith is a permanent error to record as FAILED, without running
	// the effect, in the next attempt at the group's transaction.
	failWith error

	// wake carries true when the outcome is ready, false when the op's
	// goroutine is promoted to lead the next group commit.
	wake chan bool
}

func (db *DB) newOp(ctx context.Context, req *Request, effect func(*Tx) ([]byte, error)) (*op, error) {
	switch {
	case req.Handler == "":
		return nil, ErrHandlerRequired
	case req.Key == "":
		return nil, ErrKeyRequired
	}
	if err := bucket.CheckMarkKey(req.Handler, req.Key); err != nil {
		return nil, err
	}
	return &op{
		ctx:  ctx,
		req:  req,
		mkey: bucket.MarkKey(req.Handler, req.Key),
		hash: sha256.Sum256(req.Payload),
		// Until a snapshot has looked, every window must be read.
		checkFrom: math.MinInt64,
		effect:    effect,
	}, nil
}

// answerFromSnapshot answers, from one read transaction, every op whose key
// already has a final mark (or a live claim). This is the duplicate fast
// path: no write lock, no fsync. It reports whether all ops were answered.
//
// An op left unanswered remembers which windows it has looked in and found
// sealed, so that its write path need not look there again (findMarkFrom).
func (db *DB) answerFromSnapshot(ops []*op) bool {
	// Read the window list before the snapshot: every window older than
	// its newest was sealed by then, so the snapshot holds all its marks.
	live := db.windows.Windows()
	sealedBelow := int64(math.MinInt64)
	if len(live) > 0 {
		sealedBelow = live[len(live)-1].Start
	}
	if len(ops) == 1 && !db.mayHaveMark(live, ops[0].mkey) {
		ops[0].checkFrom = sealedBelow
		return false // certainly unseen: no need for a read transaction
	}
	all := true
	err := db.guard(func() error {
		return db.bolt.View(func(btx *bolt.Tx) error {
			now := db.clock.read()
			for _, o := range ops {
				m, err := db.findMark(btx, o.mkey)
				switch {
				case err != nil:
					o.fail(outcomeAborted, err)
				case m != nil && o.answer(m, now):
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
func (o *op) answer(m *bucket.FoundMark, now time.Time) bool {
	if m.PayloadHash != o.hash {
		o.fail(outcomeKeyReuse, ErrKeyReuse)
		return true
	}
	first := time.Unix(0, m.FirstSeen)
	switch m.State {
	case bucket.Done:
		o.res = Result{Response: m.Response, Duplicate: true, FirstSeen: first}
		o.err, o.kind = nil, outcomeDuplicate
	case bucket.Failed:
		o.res = Result{Duplicate: true, FirstSeen: first}
		o.err, o.kind = &FailedError{Message: m.Error}, outcomeFailedReplayed
	case bucket.InProgress:
		if now.UnixNano() >= m.LeaseUntil {
			return false
		}
		o.fail(outcomeInProgress, ErrInProgress)
	}
	return true
}

func (o *op) fail(kind outcome, err error) {
	o.res, o.err, o.kind = Result{}, err, kind
}

// finish waits for nothing: it settles a single Apply's op and re-raises a
// panic from its effect in the caller's goroutine, where it belongs.
func (db *DB) finish(o *op) (Result, error) {
	res, err := db.settle(o)
	if o.panicVal != nil {
		panic(o.panicVal)
	}
	return res, err
}

// settle counts and logs o's outcome and returns it as the caller sees it.
func (db *DB) settle(o *op) (Result, error) {
	db.stats.count(o.req.Handler, o.kind)
	if o.kind == outcomeApplied {
		defer runHooks(o.hooks)
	}
	if o.kind == outcomeDuplicate && db.log.Enabled(o.ctx, slog.LevelInfo) {
		db.log.LogAttrs(o.ctx, slog.LevelInfo, "duplicate suppressed",
			slog.String("handler", o.req.Handler),
			slog.String("key", o.req.Key),
			slog.Duration("age", db.clock.read().Sub(o.res.FirstSeen)))
	}
	return o.res, requestError("apply", o.req, o.err)
}
