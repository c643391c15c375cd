package oncekv

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/oncekv/oncekv/bucket"
)

// group is the group commit of concurrent Apply calls.
//
// The first caller to arrive when no commit is running becomes the leader:
// it takes every op queued so far, runs them in one write transaction and
// wakes their callers. Ops that arrive meanwhile queue up; when the leader is
// done, it promotes the first of them to lead the next commit. So a commit
// takes whatever arrived while the previous one was flushing and never waits
// for more: a lone caller commits at once, and N concurrent callers share
// roughly one fsync per flush instead of N. (bbolt's Batch waits up to 10 ms
// for 1000 calls, which a handful of callers never fill.)
type group struct {
	mu      sync.Mutex
	queue   []*op
	leading bool
	// last is the size of the last batch committed and took how long its
	// commit took; a promoted leader uses them to gather the callers of
	// that batch, who are about to come back (see gatherLocked).
	last     int
	lastTook time.Duration
}

// submit runs o through the group commit and returns once o's outcome is
// settled.
func (db *DB) submit(o *op) {
	g := &db.group
	o.wake = make(chan bool, 1) // only ops that reach the group need one
	g.mu.Lock()
	g.queue = append(g.queue, o)
	if g.leading {
		g.mu.Unlock()
		if done := <-o.wake; done {
			return
		}
		g.mu.Lock() // promoted: o now leads
		// The queue holds callers that were not in the last batch.
		g.gatherLocked(len(g.queue) + g.last)
	} else {
		g.leading = true
		// o was likely in the last batch, and the rest of it is returning.
		g.gatherLocked(g.last)
	}
	for {
		n := min(len(g.queue), db.opts.MaxGroupSize)
		batch := g.queue[:n:n]
		g.queue = g.queue[n:]
		g.mu.Unlock()

		db.writeMu.Lock()
		began := time.Now()
		_ = db.commitOps(batch)
		took := time.Since(began)
		db.writeMu.Unlock()

		mine := false
		for _, b := range batch {
			if b == o {
				mine = true
				continue
			}
			b.wake <- true
		}
		g.mu.Lock()
		g.last, g.lastTook = len(batch), took
		if mine {
			break
		}
	}
	if len(g.queue) > 0 {
		g.queue[0].wake <- false
	} else {
		g.leading = false
	}
	g.mu.Unlock()
}

// gatherLocked lets a new leader wait, briefly, until want callers are
// queued: the callers of the commit that just ended were woken a moment ago
// and are about to queue their next requests. Without waiting, concurrent
// callers fall into a rhythm where every other commit carries one request
// (or two cohorts take turns), and throughput halves. The wait ends as soon
// as they are queued, and never lasts longer than a tenth of the last
// commit, so it costs at most a tenth of the throughput even when nobody
// comes back. A lone caller never waits: the last batch was its own.
func (g *group) gatherLocked(want int) {
	if g.last <= 1 || len(g.queue) >= want {
		return
	}
	deadline := time.Now().Add(g.lastTook / 10)
	for len(g.queue) < want && time.Now().Before(deadline) {
		g.mu.Unlock()
		runtime.Gosched()
		g.mu.Lock()
	}
}

// errRetry rolls back a group transaction so it can run again without the op
// that failed.
var errRetry = errors.New("oncekv: retry group without the failed op")

// commitOps decides every op in one write transaction and commits it. When an
// op's effect fails, bbolt has no savepoint to undo just that effect, so the
// whole transaction rolls back and runs again without it (or, for a
// permanent failure, with only its FAILED mark). Each attempt settles at
// least one op for good, so the loop ends. It returns the commit error, if
// the last attempt's commit failed; every op then carries it. The caller
// holds writeMu.
func (db *DB) commitOps(ops []*op) error {
	pending := ops
	for len(pending) > 0 {
		err := db.writeLocked(func(w *writeTx) error {
			return db.decide(w, pending)
		})
		if errors.Is(err, errRetry) {
			kept := pending[:0:0]
			for _, o := range pending {
				if !o.settled {
					kept = append(kept, o)
				}
			}
			pending = kept
			continue
		}
		for _, o := range pending {
			if !o.settled && err != nil {
				cerr := err
				if !errors.Is(err, ErrPoisoned) && !errors.Is(err, ErrNoSpace) {
					cerr = fmt.Errorf("oncekv: commit: %w", err) // those two say so already
				}
				o.fail(outcomeAborted, cerr)
			}
			o.settled = true
		}
		return err
	}
	return nil
}

// decide runs the ops in order inside one write transaction. Outcomes it sets
// stay tentative until the commit; settled ones are final either way.
func (db *DB) decide(w *writeTx, ops []*op) error {
	now := w.now
	for _, o := range ops {
		o.res, o.err, o.kind = Result{}, nil, outcomeNone
		if err := o.ctx.Err(); err != nil {
			o.fail(outcomeAborted, err)
			o.settled = true
			continue
		}
		// Look again under the write lock: a concurrent group, or an earlier
		// op of this one, may have written the mark since the snapshot.
		found, err := db.findMarkFrom(w.btx, o.mkey, o.checkFrom)
		if err != nil {
			o.fail(outcomeAborted, err)
			o.settled = true
			continue
		}
		if found != nil && o.answer(found, now) {
			continue
		}
		mark := bucket.Mark{PayloadHash: o.hash, FirstSeen: now.UnixNano()}
		window := db.placeMark(now)
		if found != nil {
			// Taking over an expired claim: the mark stays where it was
			// first seen.
			mark.FirstSeen, window = found.FirstSeen, found.Window
		}
		if o.failWith != nil {
			mark.State, mark.Error = bucket.Failed, o.failWith.Error()
			o.res, o.err, o.kind = Result{}, &FailedError{Message: mark.Error, cause: o.failWith}, outcomeFailedRecorded
		} else {
			db.crashAt(crashBeforeEffect)
			resp, err := runEffect(w.tx, o)
			if o.panicVal != nil {
				o.kind, o.settled = outcomeEffectError, true
				return errRetry
			}
			if err == nil {
				err = o.ctx.Err() // done during the effect: apply nothing
			}
			if err != nil {
				if IsPermanent(err) {
					o.failWith = err
				} else {
					o.fail(outcomeEffectError, err)
					o.settled = true
				}
				return errRetry
			}
			db.crashAt(crashAfterEffect)
			mark.State, mark.Response = bucket.Done, resp
			o.res, o.kind = Result{Response: resp}, outcomeApplied
		}
		o.res.FirstSeen = timeFromNano(mark.FirstSeen)
		if err := w.putMark(window, o.mkey, &mark); err != nil {
			return fmt.Errorf("oncekv: write mark: %w", err)
		}
	}
	return nil
}

// runEffect calls o's effect, turning a panic into o.panicVal so the group
// can roll back and carry on; the panic is raised again in o's own caller.
// The response is copied: the effect may have returned a slice of a bucket
// value, which is only valid inside the transaction.
func runEffect(tx *Tx, o *op) (resp []byte, err error) {
	o.hooks = nil // an earlier attempt's hooks were rolled back with it
	if o.effect == nil {
		return nil, nil
	}
	tx.w.owner = o
	defer func() { tx.w.owner = nil }()
	defer func() {
		// The value is kept as it was, so a caller's recover sees its own
		// panic; the stack of the goroutine that ran it is lost.
		if r := recover(); r != nil {
			o.panicVal = r
		}
	}()
	resp, err = o.effect(tx)
	if resp != nil {
		resp = append(make([]byte, 0, len(resp)), resp...)
	}
	return resp, err
}
