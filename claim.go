package oncekv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/markid"
)

// Claim is the two-phase form of Apply, for an effect that cannot join the
// store's transaction (a payment gateway, an e-mail): DB.Claim marks the key
// IN_PROGRESS under a lease and a fencing token, the holder does the
// external work, then records the outcome with Complete or Fail (see
// ExampleDB_Claim). Hand the external system both Key, to deduplicate on,
// and Token, to fence with; never the token as the key.
//
// Once the lease has run out, the next Claim (or Apply) of the key takes it
// over with a greater token, and the old holder's Extend, Complete and Fail
// return ErrFenced and change nothing: the token, not the clock, decides
// (docs/design/claims.md). A Claim is safe for concurrent use; its
// operations run one at a time.
type Claim struct {
	db   *DB
	req  Request // Handler and Key only, for errors and counters
	mkey []byte
	key  string // see Key

	mu struct {
		sync.Mutex
		state      claimState
		token      uint64
		leaseUntil time.Time
		result     Result
		lost       error // the ErrFenced that ended the claim, repeated to every later call
		// prev is the attempt the claim took over, nil for a first one.
		prev *Attempt
	}
}

type claimState uint8

const (
	claimHeld     claimState = iota
	claimDone                // the key is DONE: found so by Claim, or completed by this claim
	claimFailed              // this claim recorded a permanent failure
	claimReleased            // this claim let the key go after a transient failure
	claimParked              // this claim parked the key (ClaimWith's probe)
)

// releasedLease is a released claim's lease end: expired whatever the clock.
const releasedLease = math.MinInt64

// Claim claims req's key for lease. A free key, or one whose claim's lease
// ran out or was released, is marked IN_PROGRESS with a fresh token, greater
// than every token issued before, in one commit shared with concurrent
// calls; the Claim returned holds the key. A DONE key returns a Claim whose
// Done is true and Result the stored one, from a read transaction; a
// FAILED key returns its *FailedError.
//
// Errors, each in a *RequestError: ErrInProgress (an *InProgressError,
// never waiting), ErrKeyReuse, ErrInvalidLease, ctx's error, ErrClosed, and
// the bad input errors of Apply.
func (db *DB) Claim(ctx context.Context, req Request, lease time.Duration) (*Claim, error) {
	if !db.life.enter() {
		return nil, ErrClosed
	}
	defer db.life.exit()
	if err := ctx.Err(); err != nil {
		db.stats.count(req.Handler, outcomeAborted)
		return nil, requestError("claim", &req, err)
	}
	o, err := db.newOp(ctx, &req, nil)
	if err == nil && lease <= 0 {
		err = fmt.Errorf("%w, got %v", ErrInvalidLease, lease)
	}
	if err != nil {
		db.stats.count(req.Handler, outcomeInvalid)
		return nil, requestError("claim", &req, err)
	}
	c := &Claim{db: db, req: Request{Handler: req.Handler, Key: req.Key}, mkey: o.mkey, key: claimKey(o.mkey)}
	if !db.answerFromSnapshot([]*op{o}) {
		// A step answered from the mark leaves its kind set; a taken claim,
		// outcomeNone.
		if db.commitStep(o, func(w *writeTx) error { return c.take(w, o, lease) }) == nil && o.kind == outcomeNone {
			db.crashAt(crashClaimTaken)
		}
	}
	// settle counts the outcome and logs a duplicate, as for Apply.
	res, err := db.settle(o)
	if err != nil {
		var re *RequestError
		if errors.As(err, &re) {
			re.Op = "claim"
		}
		return nil, err
	}
	switch {
	case o.kind == outcomeDuplicate:
		c.mu.state, c.mu.result = claimDone, res
	case c.mu.prev != nil:
		db.stats.countExtra(req.Handler, countTakeover)
	default:
		db.noteIfLate(ctx, req.Handler, req.Key, o.mhash)
	}
	return c, nil
}

// errAnswered ends a claim's step answered by the mark read again under
// the write lock (o holds the answer).
var errAnswered = errors.New("oncekv: answered from the mark")

// errUserExit ends the step of a Complete whose effect panicked or called
// runtime.Goexit; commitStep raises either again.
var errUserExit = errors.New("oncekv: the effect panicked or called runtime.Goexit")

// commitStep runs step, a claim's write, through the group commit as o's,
// and returns o's error once settled, after raising again a panic or
// runtime.Goexit of Complete's effect.
func (db *DB) commitStep(o *op, step func(w *writeTx) error) error {
	o.step = step
	db.group.submit(o)
	if o.panicVal != nil || o.goexit {
		// Complete's effect: an effect error (a Goexit of this goroutine
		// never gets here: runEffect counted it).
		db.stats.count(o.req.Handler, outcomeEffectError)
	}
	if o.panicVal != nil {
		panic(o.panicVal)
	}
	if o.goexit {
		runtime.Goexit()
	}
	return o.err
}

// decideStep runs o's step in w, for decideOne: a step that failed is
// settled and reported for undo, as it may have written part of its change.
func decideStep(w *writeTx, o *op) (undo bool) {
	o.res, o.err, o.kind = Result{}, nil, outcomeNone
	if err := o.ctx.Err(); err != nil {
		o.fail(outcomeAborted, err)
		o.settled = true
		return false
	}
	switch err := o.step(w); err {
	case nil, errAnswered:
		return false
	default:
		o.fail(outcomeAborted, err)
		o.settled = true
		return true
	}
}

// take claims the key in w, unless its mark, read again under the write
// lock, answers o.
func (c *Claim) take(w *writeTx, o *op, lease time.Duration) error {
	c.mu.prev = nil // this run's, not an earlier run's of a retried commit
	found, err := c.db.findMark(w.btx, o.mkey)
	if err != nil {
		return err
	}
	if found != nil && o.answer(found, w.now) {
		return errAnswered
	}
	if err := o.ctx.Err(); err != nil {
		return err
	}
	token, err := layout.NextClaimToken(w.btx)
	if err != nil {
		return err
	}
	mark := layout.Mark{
		State:       layout.InProgress,
		PayloadHash: o.hash,
		LeaseUntil:  leaseDeadline(w.now, lease),
		Token:       token,
		FirstSeen:   w.now.UnixNano(),
	}
	if found != nil {
		// Taking over: the mark stays in its window unless it would expire
		// there before the new lease ends. The attempt taken over is kept
		// for TakenOver, the attempt's start and count on the mark.
		mark.FirstSeen = found.FirstSeen
		mark.Takeovers, mark.AttemptStart = found.Takeovers+1, w.now.UnixNano()
		prev := attemptOf(o.req, &found.Mark)
		prev.Takeovers = int(mark.Takeovers)
		c.mu.prev = &prev
		_, err = w.rewriteMark(found.Window, o.mkey, &mark)
	} else {
		err = w.putMarkLeased(c.db.placeMark(w.now), o.mkey, &mark)
	}
	if err != nil {
		return fmt.Errorf("oncekv: write mark: %w", err)
	}
	// c is not shared yet, so its fields need no lock.
	c.mu.token, c.mu.leaseUntil = token, timeFromNano(mark.LeaseUntil)
	return nil
}

// leaseDeadline is now+lease in Unix nanoseconds, saturated, not wrapped.
func leaseDeadline(now time.Time, lease time.Duration) int64 {
	n := now.UnixNano()
	if n > 0 && int64(lease) > math.MaxInt64-n {
		return math.MaxInt64
	}
	return n + int64(lease)
}

// Key returns the idempotency key to hand the external system: 64 lowercase
// hex digits, the SHA-256 of the length-prefixed Handler and Key. It is the
// same for every claim of (Handler, Key), in every process, across
// takeovers and restarts, and differs between pairs.
func (c *Claim) Key() string {
	if c == nil {
		return ""
	}
	return c.key
}

// claimKey is Claim.Key of the mark key mkey.
func claimKey(mkey []byte) string { return markid.ClaimKey(mkey) }

// Token returns the claim's fencing token, strictly greater than any
// earlier claim's of the key, for the external system (or Bucket.PutFenced)
// to refuse a zombie's late call; 0 for a claim whose key was done. Never
// the idempotency key: a takeover mints a new one.
func (c *Claim) Token() uint64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.token
}

// Done reports whether the key is done: DONE when claimed (do not run the
// effect), or completed by this claim. Result then holds the stored result.
func (c *Claim) Done() bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.state == claimDone
}

// Result returns the key's stored result once Done is true, and the zero
// Result before.
func (c *Claim) Result() Result {
	if c == nil {
		return Result{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	res := c.mu.result
	res.Response = bytes.Clone(res.Response) // the caller's to keep and modify
	return res
}

// LeaseUntil returns when the lease runs out, as of the last Claim or
// Extend; the zero time once the claim no longer holds the key.
func (c *Claim) LeaseUntil() time.Time {
	if c == nil {
		return time.Time{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.state != claimHeld || c.mu.lost != nil {
		return time.Time{}
	}
	return c.mu.leaseUntil
}

// Extend moves the lease's end to lease from now (it may also shorten it).
// Errors: ErrFenced once the key was taken over (give up the work),
// ErrClaimDone, ErrInvalidLease, ctx's error, ErrClosed.
func (c *Claim) Extend(ctx context.Context, lease time.Duration) error {
	var bad error
	if lease <= 0 {
		bad = fmt.Errorf("%w, got %v", ErrInvalidLease, lease)
	}
	return c.wrap(c.run(func() error {
		var until int64
		err := c.updateLocked(ctx, outcomeNone, bad, nil, func(w *writeTx, _ *op, m *layout.FoundMark) error {
			mark := m.Mark
			mark.LeaseUntil = leaseDeadline(w.now, lease)
			until = mark.LeaseUntil
			_, err := w.rewriteMark(m.Window, c.mkey, &mark)
			return err
		})
		if err == nil {
			c.mu.leaseUntil = timeFromNano(until)
		}
		return err
	}))
}

// Complete records the key DONE with response, returned to every duplicate
// from then on. effect, when not nil, runs in the same transaction, so its
// writes and the mark commit together. An effect error writes nothing and
// the claim keeps the key; one wrapped with Permanent records FAILED and
// returns a *FailedError. A panic or runtime.Goexit of effect writes nothing
// and goes on in the caller. As Apply's, effect may run more than once.
//
// Errors: ErrFenced (effect does not run), ErrClaimDone,
// ErrResponseTooLarge (nothing written, the claim keeps the key), ctx's
// error, ErrClosed.
func (c *Claim) Complete(ctx context.Context, response []byte, effect func(tx *Tx) error) (Result, error) {
	var res Result
	var done *op
	err := c.run(func() error {
		resp := bytes.Clone(response) // the caller may reuse response at once
		first, o, err := c.doneLocked(ctx, outcomeApplied, resp, effect)
		done = o
		if IsPermanent(err) {
			if ferr := c.failLocked(ctx, err); ferr != nil {
				return ferr
			}
			return &FailedError{Message: err.Error(), cause: err}
		}
		if err == nil {
			c.mu.state, c.mu.result = claimDone, Result{Response: resp, FirstSeen: timeFromNano(first)}
			res = c.mu.result
			res.Response = bytes.Clone(resp)
		}
		return err
	})
	if err == nil && done != nil {
		runHooks(done.hooks) // outside the claim's lock: a hook may use the claim
	}
	return res, c.wrap(err)
}

// Fail ends the claim after the external work failed: Permanent(err)
// records the key FAILED with err's message; any other err, nil included,
// releases the key at once for a retry. err's methods run on the caller's
// goroutine: a panic there changes nothing. Errors: ErrFenced, ErrClaimDone,
// ErrResponseTooLarge for a permanent error's message, ctx's error,
// ErrClosed.
func (c *Claim) Fail(ctx context.Context, err error) error {
	return c.wrap(c.run(func() error { return c.failLocked(ctx, err) }))
}

// doneLocked records the key DONE with resp (not copied), after running
// effect if not nil, and counts kind; it returns the key's FirstSeen and
// the op whose hooks the commit left.
func (c *Claim) doneLocked(ctx context.Context, kind outcome, resp []byte, effect func(*Tx) error) (first int64, done *op, err error) {
	err = c.updateLocked(ctx, kind, c.db.checkResponse(len(resp)), effect, func(w *writeTx, o *op, m *layout.FoundMark) error {
		done = o
		mark := m.Mark
		mark.State, mark.Response, mark.LeaseUntil, mark.AttemptStart = layout.Done, resp, 0, 0
		first = m.FirstSeen
		_, err := w.rewriteMark(m.Window, c.mkey, &mark)
		return err
	})
	return first, done, err
}

func (c *Claim) failLocked(ctx context.Context, cause error) error {
	// The caller's error is looked into here, outside the transaction: a
	// panic in its methods is the caller's own.
	if !IsPermanent(cause) {
		return c.releaseLocked(ctx, outcomeEffectError)
	}
	msg := cause.Error()
	err := c.updateLocked(ctx, outcomeFailedRecorded, c.db.checkResponse(len(msg)), nil, func(w *writeTx, _ *op, m *layout.FoundMark) error {
		mark := m.Mark
		mark.State, mark.Error, mark.LeaseUntil, mark.AttemptStart = layout.Failed, msg, 0, 0
		_, err := w.rewriteMark(m.Window, c.mkey, &mark)
		return err
	})
	if err == nil {
		c.mu.state = claimFailed
	}
	return err
}

// releaseLocked lets the key go at once, for a retry, counting kind.
func (c *Claim) releaseLocked(ctx context.Context, kind outcome) error {
	err := c.updateLocked(ctx, kind, nil, nil, func(w *writeTx, _ *op, m *layout.FoundMark) error {
		mark := m.Mark
		mark.LeaseUntil = releasedLease
		return w.putMark(m.Window, c.mkey, &mark) // released: nothing to outlive
	})
	if err == nil {
		c.mu.state = claimReleased
	}
	return err
}

// effectError carries an error of Complete's effect out of the transaction.
type effectError struct{ err error }

// stepEffect runs o's effect, if any, in w, as runEffect does for Apply.
func (db *DB) stepEffect(w *writeTx, o *op) error {
	if o.effect == nil {
		return nil
	}
	db.crashAt(crashBeforeEffect)
	r := runEffect(w.tx, o)
	switch {
	case o.panicVal != nil, o.goexit:
		return errUserExit
	case r.err != nil:
		return &effectError{r.err}
	}
	db.crashAt(crashAfterEffect)
	return nil
}

func (e *effectError) Error() string { return e.err.Error() }

// run calls fn with c locked, while the DB is open.
func (c *Claim) run(fn func() error) error {
	if c == nil || c.db == nil {
		return ErrUnknownClaim
	}
	if !c.db.life.enter() {
		return ErrClosed
	}
	defer c.db.life.exit()
	c.mu.Lock()
	defer c.mu.Unlock()
	return fn()
}

// updateLocked runs fn on the key's mark in a write transaction through
// the group commit, if c still holds the key and bad (the caller's input
// error) is nil, and counts the outcome, kind on success. fn may run more
// than once and must set nothing the last run does not. effect, Complete's,
// runs after the holder check and before fn. The caller holds c.mu.
func (c *Claim) updateLocked(ctx context.Context, kind outcome, bad error, effect func(*Tx) error, fn func(w *writeTx, o *op, m *layout.FoundMark) error) error {
	err := bad
	switch {
	case err != nil:
	case c.mu.lost != nil:
		err = c.mu.lost
	case c.mu.state != claimHeld:
		err = ErrClaimDone
	default:
		// mkey makes the claim's own key the one its effect may not
		// Tx.Mark (ErrMarkOwnKey): the step writes that mark itself.
		o := &op{ctx: ctx, req: &c.req, mkey: c.mkey}
		if effect != nil {
			o.effect = func(tx *Tx) ([]byte, error) { return nil, effect(tx) }
		}
		err = c.db.commitStep(o, func(w *writeTx) error {
			m, err := c.db.findMark(w.btx, c.mkey)
			if err != nil {
				return err
			}
			if err := c.heldBy(m); err != nil {
				return err
			}
			if err := c.db.stepEffect(w, o); err != nil {
				return err
			}
			if err := fn(w, o, m); err != nil {
				return err
			}
			return ctx.Err() // done meanwhile: apply nothing
		})
	}
	var ee *effectError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		err, kind = ee.err, outcomeEffectError
		if IsPermanent(err) {
			kind = outcomeNone // counted when the failure is recorded
		}
	case errors.Is(err, ErrFenced):
		c.mu.lost, kind = err, outcomeFenced
	case errors.Is(err, ErrParkFull):
		kind = outcomeParkRefused
	case errors.Is(err, ErrClaimDone), errors.Is(err, ErrInvalidLease), errors.Is(err, ErrResponseTooLarge):
		kind = outcomeInvalid
	default:
		kind = outcomeAborted
	}
	c.db.stats.count(c.req.Handler, kind)
	return err
}

// heldBy returns nil if m shows that c still holds the key, and ErrFenced
// with the reason if not.
func (c *Claim) heldBy(m *layout.FoundMark) error {
	switch {
	case m == nil:
		return fmt.Errorf("%w: the key's mark is gone (its window expired, or it was forgotten)", ErrFenced)
	case m.State == layout.InProgress && m.Token == c.mu.token:
		return nil
	case m.Token > c.mu.token:
		return &FenceError{Stored: m.Token, Presented: c.mu.token}
	}
	return fmt.Errorf("%w: the key was taken over and is now %v", ErrFenced, m.State)
}

// wrap names the claim's handler and key in err.
func (c *Claim) wrap(err error) error {
	if c == nil {
		return err
	}
	return requestError("claim", &c.req, err)
}
