package oncekv

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/oncekv/oncekv/internal/layout"
)

// errRetry rolls back a transaction of commitOpsLocked so that it runs again
// without the op that failed.
var errRetry = errors.New("oncekv: roll back the ops' transaction and run it again")

// errGoexit is the outcome of an op whose effect called runtime.Goexit;
// finish ends the caller's goroutine instead of returning it.
var errGoexit = errors.New("oncekv: effect called runtime.Goexit")

// commitOpsLocked decides ops in order, commits them and settles every one;
// the caller holds writeMu. bbolt has no savepoints, so when an op fails
// after writing, the ops before it run again in a fresh transaction without
// it, and those after it go on in the next: each effect runs at most twice
// when effects are deterministic, and one effect, one mark, one commit
// holds for every op (docs/design/group-commit.md). A failed commit's error
// is returned and carried by every op not settled by then.
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
				// A permanent error: its FAILED mark commits with the ops before
				// it and its effect does not run again, so its refused writes are
				// counted now.
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

// decide runs the ops not yet settled in w, in order. Outcomes stay
// tentative until the commit; on an op whose writes must be undone it stops
// and returns the op's index with errRetry.
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

// decideOne decides o in w, and reports true when o failed after (possibly)
// writing: o is then settled, or holds the permanent error to record in the
// next attempt.
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
	// Look again under the write lock: a concurrent group, or an earlier op
	// of this one, may have written the mark since the snapshot.
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
		// Taking over an expired claim: first-seen time kept, and a token
		// greater than the claim's, so the holder's late Complete is fenced.
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
			// ctx ended during the effect: aborted, with the effect's own error.
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

// runEffect calls o's effect in tx, and looks into what it returned within
// the same guarded call: a panic there is the caller's, kept in o.panicVal
// for finish. A detached op's effect (one of several in a group commit)
// runs on a goroutine of its own, so that its runtime.Goexit ends only that
// goroutine and is repeated in its caller's (docs/design/group-commit.md).
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
			// Goexit ends the caller's goroutine before finish (or commitStep)
			// could count the request: count it here.
			tx.w.db.stats.count(o.req.Handler, outcomeEffectError)
		}
	}()
	callEffect(tx, o, &r)
	return r
}

// runDetached runs a detached op's effect on a goroutine of its own.
func runDetached(tx *Tx, o *op) (r effectResult) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		// As in guard: a fault on a damaged page is a panic, not a crash.
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		callEffect(tx, o, &r)
	}()
	<-done
	return r
}

// callEffect runs the effect and records in o a panic or a runtime.Goexit
// (recover returns nil during a Goexit).
func callEffect(tx *Tx, o *op, r *effectResult) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if p := recover(); p != nil {
			// Kept as it was, so the caller's recover sees its own panic.
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
