package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/oncekv/oncekv"
)

// run decides ops: from their marks by a plain read where they have one,
// else in transactions that run their effects and write their marks. It
// returns the error that ended the run early, which every op not settled
// by then carries.
func (s *Store) run(ctx context.Context, ops []*op) error {
	if len(ops) == 0 {
		return nil
	}
	err := s.answerFromMarks(ctx, ops)
	if err == nil {
		var pending []*op
		for _, o := range ops {
			if !o.settled {
				pending = append(pending, o)
			}
		}
		err = s.commitOps(ctx, pending)
	}
	if err != nil {
		for _, o := range ops {
			if !o.settled {
				o.fail(outcomeAborted, err)
				o.settled = true
			}
		}
	}
	return err
}

// answerFromMarks is the duplicate path: one plain read (no transaction
// block, no lock, no write) of the marks of ops, which settles every op
// whose key is DONE, FAILED, reused or held by a live claim.
func (s *Store) answerFromMarks(ctx context.Context, ops []*op) error {
	now, err := s.now(ctx)
	if err != nil {
		return err
	}
	found, err := s.lookup(ctx, s.pool, ops)
	if err != nil {
		return err
	}
	for i, o := range ops {
		if m := found[i]; m != nil && o.answer(m, now.UnixNano()) {
			o.settled = true
		}
	}
	return nil
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// lookup reads the marks of ops' keys, in one query: found[i] is ops[i]'s,
// nil when it has none.
func (s *Store) lookup(ctx context.Context, q querier, ops []*op) ([]*mark, error) {
	if len(ops) == 1 {
		id := &ops[0].id
		m, err := scanMark(q.QueryRow(ctx, s.q.lookup, id.id, id.handler, id.key))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return make([]*mark, 1), nil
		case err != nil:
			return nil, err
		}
		m, err = s.checkMark(m, id)
		return []*mark{m}, err
	}
	rows, err := q.Query(ctx, s.q.lookupMany, lookupArgs(ops)...)
	if err != nil {
		return nil, err
	}
	return s.readMarks(rows, ops)
}

// lookupArgs are the arguments of lookupMany for ops.
func lookupArgs(ops []*op) []any {
	ids, handlers, keys := make([][]byte, len(ops)), make([][]byte, len(ops)), make([][]byte, len(ops))
	for i, o := range ops {
		ids[i], handlers[i], keys[i] = o.id.id, o.id.handler, o.id.key
	}
	return []any{ids, handlers, keys}
}

// readMarks reads the rows of lookupMany for ops, and closes them.
func (s *Store) readMarks(rows pgx.Rows, ops []*op) ([]*mark, error) {
	defer rows.Close()
	found := make([]*mark, len(ops))
	for rows.Next() {
		var at int64
		m, err := scanMark(rows, &at)
		if err != nil {
			return nil, err
		}
		if at < 1 || at > int64(len(ops)) {
			return nil, fmt.Errorf("oncekv: look-up answered request %d of %d", at, len(ops))
		}
		if found[at-1], err = s.checkMark(m, &ops[at-1].id); err != nil {
			return nil, err
		}
	}
	return found, rows.Err()
}

// errAborted is the error of an effect that returned none but left its
// transaction aborted: one of its statements failed, and it went on.
var errAborted = errors.New("oncekv: a statement of the effect failed and left its transaction aborted; nothing of it applies")

// errRetry rolls back an attempt because one of its ops failed after
// writing (or maybe writing) something; the next attempt runs without
// that op's writes.
var errRetry = errors.New("oncekv: roll back the attempt and run it again")

// commitOps decides ops, in order, in as few transactions as it can, and
// settles every one; it returns the error of a transaction that failed.
//
// An op that fails after its effect may have written something (its
// effect returned an error or panicked, its response is too large) must
// have its writes undone, and the way to undo them without a savepoint is
// to roll the transaction back. The ops before it did nothing wrong, so
// they run again in a fresh transaction that commits without it (or with
// its FAILED mark only, for a permanent error), and the ops after it go
// on in the next one: each effect runs at most twice, plus once per
// failure, and "one effect, one mark, one commit" holds for every op.
func (s *Store) commitOps(ctx context.Context, ops []*op) error {
	start, end := 0, len(ops)
	for start < len(ops) {
		failed, err := s.attempt(ctx, ops[start:end])
		switch {
		case err == nil:
			for _, o := range ops[start:end] {
				o.settled = true
			}
			start, end = end, len(ops)
		case failed >= 0:
			k := start + failed
			switch {
			case !ops[k].settled:
				end = k + 1 // a permanent error: its FAILED mark commits with the ops before it
			case k == start:
				start, end = k+1, len(ops)
			default:
				end = k
			}
		default:
			return err
		}
	}
	return nil
}

// attempt decides the ops not yet settled in one transaction, and
// commits it. When an op fails in a way that needs its writes undone, it
// returns the op's index with errRetry (the transaction rolled back);
// with any other error, nothing of the attempt was applied.
func (s *Store) attempt(ctx context.Context, ops []*op) (int, error) {
	tx, w, err := s.begin(ctx)
	if err != nil {
		return -1, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it does nothing
	var todo []*op
	for _, o := range ops {
		if !o.settled {
			todo = append(todo, o)
		}
	}
	held, err := s.lockAndRead(ctx, tx, todo)
	if err != nil {
		return -1, err
	}
	for i, o := range ops {
		if o.settled {
			continue
		}
		undo, err := s.decide(ctx, tx, w, o, held[o.id.claimKey])
		if err != nil {
			return -1, err
		}
		if undo {
			return i, errRetry
		}
	}
	return -1, s.commit(ctx, tx, w)
}

// begin reads the store's time, makes sure the partition of its window is
// attached (its DDL, if any, in a transaction of its own), and begins the
// transaction of a write at that time, whose marks go in w. The caller
// defers tx.Rollback.
func (s *Store) begin(ctx context.Context) (pgx.Tx, *writes, error) {
	now, err := s.now(ctx)
	if err != nil {
		return nil, nil, err
	}
	cur := s.window.Start(now)
	if err := s.ensureWindow(ctx, cur); err != nil {
		return nil, nil, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	return tx, newWrites(s, now.UnixNano(), cur), nil
}

// commit writes w's marks in tx and commits it, unless ctx ended first:
// then nothing is applied. The commit itself runs whatever ctx does, so
// that a caller giving up at that instant does not cut it in two.
func (s *Store) commit(ctx context.Context, tx pgx.Tx, w *writes) error {
	if err := s.moveOn(ctx, w); err != nil {
		return err
	}
	if err := w.flush(ctx, tx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("oncekv: commit: %w", err)
	}
	return nil
}

// moveOn places w's new marks in the current window when the clock has
// moved past the attempt's since it began (long effects, a clock a test
// drives): a window that old may even have expired and been dropped by
// now. A mark keeps the attempt's time as its FirstSeen; a later window
// only makes it live longer.
func (s *Store) moveOn(ctx context.Context, w *writes) error {
	now, err := s.now(ctx)
	if err != nil {
		return err
	}
	cur := s.window.Start(now)
	if cur == w.cur {
		return nil
	}
	if err := s.ensureWindow(ctx, cur); err != nil {
		return err
	}
	for _, m := range w.inserts {
		if m.win == w.cur {
			m.win = cur
		}
	}
	for _, r := range w.rewrites {
		if r.m.win == w.cur {
			r.m.win = cur
		}
	}
	w.cur = cur
	return nil
}

// keyState is what an attempt learnt of a key under its lock.
type keyState struct {
	locked bool
	found  *mark // its mark, read after the lock was taken
}

// lockAndRead takes the advisory locks of ops' keys without waiting and
// then reads their marks, in one round trip (the two statements
// pipelined), keyed by claim key. A key given twice is locked and read
// once.
func (s *Store) lockAndRead(ctx context.Context, tx pgx.Tx, ops []*op) (map[string]*keyState, error) {
	held := make(map[string]*keyState, len(ops))
	var distinct []*op
	var locks []int64
	for _, o := range ops {
		if held[o.id.claimKey] == nil {
			held[o.id.claimKey] = &keyState{}
			distinct = append(distinct, o)
			locks = append(locks, o.id.lock)
		}
	}
	var b pgx.Batch
	b.Queue(s.q.tryLocks, locks)
	b.Queue(s.q.lookupMany, lookupArgs(distinct)...)
	res := tx.SendBatch(ctx, &b)
	defer res.Close()
	rows, err := res.Query()
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var i int64
		var ok bool
		if err := rows.Scan(&i, &ok); err != nil {
			rows.Close()
			return nil, err
		}
		if i >= 1 && i <= int64(len(distinct)) {
			held[distinct[i-1].id.claimKey].locked = ok
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = res.Query()
	if err != nil {
		return nil, err
	}
	found, err := s.readMarks(rows, distinct)
	if err != nil {
		return nil, err
	}
	for i, o := range distinct {
		held[o.id.claimKey].found = found[i]
	}
	return held, res.Close()
}

// decide decides o in tx: from a mark written earlier in the attempt, from
// its key's mark, or by running its effect and queueing its mark in w. It
// reports undo when o failed after its effect ran: the attempt must roll
// back.
func (s *Store) decide(ctx context.Context, tx pgx.Tx, w *writes, o *op, k *keyState) (undo bool, err error) {
	o.res, o.err, o.kind = oncekv.Result{}, nil, outcomeNone
	if err := ctx.Err(); err != nil {
		o.fail(outcomeAborted, err)
		o.settled = true
		return false, nil
	}
	if m := w.written[o.id.claimKey]; m != nil {
		o.answer(m, w.now) // a duplicate within the batch: as final as m is
		return false, nil
	}
	if k.found != nil && o.answer(k.found, w.now) {
		o.settled = true // answered by a committed mark
		return false, nil
	}
	if !k.locked {
		o.fail(outcomeInProgress, errBusy)
		o.settled = true
		return false, nil
	}
	m := &mark{firstSeen: w.now, win: w.cur, fp: o.id.fp}
	if k.found != nil {
		// Taking over a claim whose lease ran out: the mark keeps its
		// first-seen time and takes a token greater than the claim's, so
		// that the holder's late Complete gets a *FenceError with both.
		m.firstSeen = k.found.firstSeen
		if m.token, err = s.nextToken(ctx, tx); err != nil {
			return false, err
		}
	}
	if o.failWith != nil {
		m.state, m.errMsg = stateFailed, o.failMsg
		o.res, o.err, o.kind = oncekv.Result{}, oncekv.NewFailedError(o.failMsg, o.failWith), outcomeFailedRecorded
	} else {
		if s.savepoints {
			if _, err := tx.Exec(ctx, "SAVEPOINT oncekv_effect"); err != nil {
				return false, err
			}
		}
		r := callEffect(ctx, tx, o)
		if r.err == nil && o.panicVal == nil && tx.Conn().PgConn().TxStatus() == 'E' {
			r.err = errAborted
		}
		switch {
		case o.panicVal != nil:
			o.kind, o.settled = outcomeEffectError, true
			return s.undoEffect(ctx, tx)
		case r.permanent && s.savepoints:
			if _, err := s.undoEffect(ctx, tx); err != nil {
				return false, err
			}
			m.state, m.errMsg = stateFailed, r.msg
			o.res, o.err, o.kind = oncekv.Result{}, oncekv.NewFailedError(r.msg, r.err), outcomeFailedRecorded
		case r.permanent:
			o.failWith, o.failMsg = r.err, r.msg
			return true, nil
		case r.err != nil && ctx.Err() != nil:
			o.fail(outcomeAborted, r.err) // the context ended during the effect
			o.settled = true
			return s.undoEffect(ctx, tx)
		case r.err != nil:
			o.fail(outcomeEffectError, r.err)
			o.settled = true
			return s.undoEffect(ctx, tx)
		case ctx.Err() != nil:
			o.fail(outcomeAborted, ctx.Err())
			o.settled = true
			return s.undoEffect(ctx, tx)
		default:
			m.state, m.response = stateDone, r.resp
			o.res, o.kind = oncekv.Result{Response: r.resp}, outcomeApplied
		}
	}
	if err := s.checkResponse(len(m.response) + len(m.errMsg)); err != nil {
		o.fail(outcomeEffectError, err)
		o.settled = true
		return s.undoEffect(ctx, tx)
	}
	o.res.Response = cloneNil(m.response)
	o.res.FirstSeen = timeFromNano(m.firstSeen)
	w.put(o, m, k.found)
	return false, nil
}

// undoEffect undoes what the effect just run wrote: with savepoints, back
// to the one before it, and the attempt goes on; without, by rolling the
// attempt back (undo).
func (s *Store) undoEffect(ctx context.Context, tx pgx.Tx) (undo bool, err error) {
	if !s.savepoints {
		return true, nil
	}
	_, err = tx.Exec(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT oncekv_effect")
	return false, err
}

// checkResponse returns oncekv.ErrResponseTooLarge, naming both sizes,
// when n bytes of response (and error message) do not fit in a mark.
func (s *Store) checkResponse(n int) error {
	if n > s.maxResponse {
		return fmt.Errorf("%w: %d bytes, more than the limit of %d", oncekv.ErrResponseTooLarge, n, s.maxResponse)
	}
	return nil
}

// nextToken draws a claim token from the schema's sequence. PostgreSQL
// never hands a sequence's value out twice, on any host, even when the
// transaction that drew it rolls back.
func (s *Store) nextToken(ctx context.Context, q querier) (uint64, error) {
	var t int64
	if err := q.QueryRow(ctx, s.q.token, s.q.tokenSeq).Scan(&t); err != nil {
		if outOfRange(err) {
			err = oncekv.ErrExhausted
		}
		return 0, fmt.Errorf("oncekv: draw a claim token: %w", err)
	}
	return uint64(t), nil
}

func cloneNil(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}
