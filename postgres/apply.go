package postgres

import (
	"bytes"
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/oncekv/oncekv"
)

// Apply applies req's effect once per (req.Handler, req.Key) within the
// dedup window (Options.Retention), as oncekv.DB.Apply does, on PostgreSQL:
//
//   - A key already DONE (or FAILED) is answered by one plain read, no
//     lock, no write, no DDL: the stored response byte for byte with
//     Duplicate set (or the recorded *oncekv.FailedError), and effect
//     does not run. Another payload (or Fingerprint) is
//     oncekv.ErrKeyReuse.
//   - A new key: effect runs in a PostgreSQL transaction, and the DONE
//     mark holding its response is written in the same transaction: both
//     commit or neither. The key's advisory lock
//     (pg_try_advisory_xact_lock) is held until then, so only one
//     transaction at a time, on any host, decides a key.
//   - A key held by a live claim is oncekv.ErrInProgress at once, as an
//     *oncekv.InProgressError with the lease's end; a key whose effect is
//     running in another transaction right now (another host's Apply) is
//     ErrInProgress too, without a lease end. The store never waits for
//     another host's effect (the embedded store waits for its write lock
//     instead: see the conformance package's differences).
//
// If effect returns an error, everything rolls back and nothing is
// recorded, so a retry runs it again. If the error is wrapped with
// oncekv.Permanent, the effect's writes roll back and the key is recorded
// FAILED in a second transaction: this call and every duplicate get a
// *oncekv.FailedError. If effect panics, the transaction rolls back and
// Apply raises the panic again. effect runs on the caller's goroutine, at
// most once per call, with the transaction the store commits: its Commit
// and Rollback do nothing (ErrEffectTx); a nested tx.Begin is a savepoint
// of its own. A nil effect records the mark only.
//
// Errors: oncekv.ErrKeyReuse, ErrInProgress, ErrFailed (a
// *FailedError), oncekv.ErrResponseTooLarge (over MaxResponseSize: nothing
// recorded), ctx's error when ctx ended before the commit (nothing
// applied), oncekv.ErrClosed, the bad input errors of the root
// (ErrHandlerRequired, ErrKeyRequired, ErrKeyTooLarge,
// ErrInvalidFingerprint: nothing written), and the database's errors: a
// connection lost before the commit applied nothing (oncekv.Classify says
// RetryLater). A connection lost during the commit itself leaves the
// outcome unknown to the caller, as with any database; the retry it
// calls for is answered from the mark if the commit happened. Each comes
// wrapped in an *oncekv.RequestError naming the handler and key.
func (s *Store) Apply(ctx context.Context, req oncekv.Request, effect func(ctx context.Context, tx pgx.Tx) ([]byte, error)) (oncekv.Result, error) {
	if !s.enter() {
		return oncekv.Result{}, oncekv.ErrClosed
	}
	defer s.exit()
	if err := ctx.Err(); err != nil {
		s.stats.count(outcomeAborted)
		return oncekv.Result{}, requestError("apply", &req, err)
	}
	o, err := s.newOp(&req, effect)
	if err != nil {
		s.stats.count(outcomeInvalid)
		return oncekv.Result{}, requestError("apply", &req, err)
	}
	s.run(ctx, []*op{o})
	res, err := s.settle(ctx, o)
	if o.panicVal != nil {
		panic(o.panicVal)
	}
	return res, err
}

// ApplyBatch applies many requests in one PostgreSQL transaction, the way
// a consumer handles one poll: each request gets its own result, as Apply
// would give it, with effect called with the request's index in reqs.
// The look-ups of the whole batch are one plain read, its locks and its
// look-ups under them one round trip, and its marks one INSERT: a few
// round trips per batch, never one per request (besides the effects'
// own). Duplicates, also within the batch, run no effect; bad requests get
// their error; a key another transaction holds gets ErrInProgress.
//
// An effect error costs only its own request: the transaction rolls back,
// the requests before it run again in a fresh transaction that commits
// without it, and the requests after it go on in the next one. So each
// effect runs at most twice, plus once per failure (at most 2n+f calls),
// and the work stays O(n) however many fail. (The measured alternative,
// a savepoint around every effect, costs more unless failures are
// common: see docs/postgres.md.) A
// panicking effect is treated as a failed one, then raised again once the
// others are committed.
//
// The returned error is non-nil only when the batch as a whole failed:
// the store is closed, ctx ended before the batch was read, or a
// transaction failed in the database (each request not settled then
// carries that error too). No request that carries an error was applied.
func (s *Store) ApplyBatch(ctx context.Context, reqs []oncekv.Request, effect func(ctx context.Context, tx pgx.Tx, i int) ([]byte, error)) ([]oncekv.BatchResult, error) {
	if !s.enter() {
		return nil, oncekv.ErrClosed
	}
	defer s.exit()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	results := make([]oncekv.BatchResult, len(reqs))
	ops := make([]*op, 0, len(reqs))
	for i := range reqs {
		var fn func(context.Context, pgx.Tx) ([]byte, error)
		if effect != nil {
			fn = func(ctx context.Context, tx pgx.Tx) ([]byte, error) { return effect(ctx, tx, i) }
		}
		o, err := s.newOp(&reqs[i], fn)
		if err != nil {
			s.stats.count(outcomeInvalid)
			results[i].Err = requestError("apply", &reqs[i], err)
			continue
		}
		o.index = i
		ops = append(ops, o)
	}
	err := s.run(ctx, ops)
	var panicked any
	for _, o := range ops {
		if o.panicVal != nil && panicked == nil {
			panicked = o.panicVal
		}
		results[o.index].Result, results[o.index].Err = s.settle(ctx, o)
	}
	if panicked != nil {
		panic(panicked)
	}
	return results, err
}

// op is one request on its way through Apply or ApplyBatch.
type op struct {
	req    *oncekv.Request
	id     ident
	effect func(context.Context, pgx.Tx) ([]byte, error)
	index  int // in ApplyBatch's reqs

	// The outcome: tentative until the transaction that decided it
	// commits; settled means it no longer depends on any commit.
	res     oncekv.Result
	err     error
	kind    outcome
	settled bool
	// failWith is a permanent error to record as FAILED, with the message
	// failMsg, without running the effect, in the next attempt.
	failWith error
	failMsg  string
	panicVal any
}

func (s *Store) newOp(req *oncekv.Request, effect func(context.Context, pgx.Tx) ([]byte, error)) (*op, error) {
	id, err := identify(req, s.salt)
	if err != nil {
		return nil, err
	}
	return &op{req: req, id: id, effect: effect}, nil
}

func (o *op) fail(kind outcome, err error) {
	o.res, o.err, o.kind = oncekv.Result{}, err, kind
}

// answer sets o's outcome from the key's mark m, and reports false when m
// does not decide it (a claim whose lease ran out, which o may take over).
func (o *op) answer(m *mark, now int64) bool {
	// A tombstone keeps no fingerprint: key reuse cannot be told.
	if !m.tomb && !m.sameRequest(&o.id) {
		o.fail(outcomeKeyReuse, oncekv.ErrKeyReuse)
		return true
	}
	switch m.state {
	case stateDone:
		o.res = oncekv.Result{Response: bytes.Clone(m.response), Duplicate: true, FirstSeen: timeFromNano(m.firstSeen), ResponseExpired: m.tomb}
		o.err, o.kind = nil, outcomeDuplicate
	case stateFailed:
		o.res = oncekv.Result{Duplicate: true, FirstSeen: timeFromNano(m.firstSeen), ResponseExpired: m.tomb}
		o.err, o.kind = oncekv.NewFailedError(m.errMsg, nil), outcomeFailedReplayed
	case stateParked:
		o.fail(outcomeParkedAnswer, &oncekv.ParkedError{Attempt: m.attempt(o.req)})
	default:
		if !m.live(now) {
			return false
		}
		o.fail(outcomeInProgress, oncekv.NewInProgressError(timeFromNano(m.leaseUntil)))
	}
	return true
}

// settle counts and logs o's outcome and returns it as the caller sees it.
func (s *Store) settle(ctx context.Context, o *op) (oncekv.Result, error) {
	s.stats.count(o.kind)
	if o.res.ResponseExpired {
		s.stats.tombDuplicates.Add(1)
	}
	if o.kind == outcomeDuplicate && s.log.Enabled(ctx, slog.LevelInfo) {
		s.log.LogAttrs(ctx, slog.LevelInfo, "duplicate suppressed",
			slog.String("handler", o.req.Handler),
			slog.String("key", o.req.Key),
			slog.Duration("age", s.clock.now().Sub(o.res.FirstSeen)))
	}
	if o.err == nil {
		return o.res, nil
	}
	return o.res, requestError("apply", o.req, o.err)
}
