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
// store's transaction: a call to a payment gateway, an e-mail. DB.Claim
// marks the key IN_PROGRESS under a lease and a fencing token; the holder
// does the external work and then records the outcome with Complete or
// Fail:
//
//	c, err := db.Claim(ctx, req, 30*time.Second)
//	if err != nil {
//		return err // ErrInProgress: another worker holds it; retry later
//	}
//	if c.Done() {
//		return reply(c.Result()) // a duplicate: the stored response
//	}
//	receipt, err := gateway.Charge(ctx, order, c.Key(), c.Token())
//	if err != nil {
//		return c.Fail(ctx, err) // released at once, unless Permanent(err)
//	}
//	res, err := c.Complete(ctx, receipt, nil)
//
// The external system gets two values, each for its own job:
//
//   - Key, the idempotency key: the same for every claim of the request's
//     (Handler, Key), across retries, takeovers and restarts. The external
//     system deduplicates on it. A worker killed after the external call and
//     before Complete is taken over by another, which calls again with the
//     same Key, and the external system answers with what it did the first
//     time instead of doing it twice.
//   - Token, the fencing token: new and greater at every takeover. The
//     external system may refuse a token lower than one it has seen for the
//     Key, which cuts off a zombie that wakes up after its lease. A token
//     never serves as the idempotency key: the retry after a takeover
//     carries a new one, and would look like a new operation.
//
// A worker that crashes or stalls past its lease needs no operator: once the
// lease has run out, the next Claim of the key takes it over with a
// strictly greater token (or the next Apply runs the effect itself). From
// then on the old holder's Extend, Complete and Fail return ErrFenced and
// change nothing, so a zombie that wakes up after a GC pause cannot record
// its late result over the new holder's. Within its lease the holder is
// safe from takeover; past it, it still completes normally as long as
// nobody has taken over: the token, not the clock, decides.
//
// A Claim is safe for concurrent use (a heartbeat goroutine may Extend it
// while another completes it); its operations run one at a time.
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
	}
}

type claimState uint8

const (
	claimHeld     claimState = iota
	claimDone                // the key is DONE: found so by Claim, or completed by this claim
	claimFailed              // this claim recorded a permanent failure
	claimReleased            // this claim let the key go after a transient failure
)

// releasedLease is the lease deadline of a released claim: expired
// whatever the clock says, even a clock that jumped backwards, so a retry
// can take the key over at once.
const releasedLease = math.MinInt64

// Claim claims req's key for an effect outside the store, for lease.
//
// When the key is free, or held by a claim whose lease has run out (or that
// was released), it writes the key's mark IN_PROGRESS, with the lease's end
// and a fresh fencing token, in one durable write transaction (shared with
// concurrent calls, as Apply's group commit), and returns a claim that
// holds the key. Tokens come from one counter for the whole
// store: each is strictly greater than every token issued before it, across
// restarts, so a takeover always gets a greater token than the holder it
// replaces.
//
// When the key is already DONE, it returns a claim whose Done is true and
// whose Result is the stored one, with Duplicate set; that path is a read
// transaction, without the write lock or an fsync. When the key FAILED
// permanently, it returns the recorded failure, a *FailedError, as Apply
// does.
//
// Errors: ErrInProgress while another claim's lease is live (never waits;
// an *InProgressError says until when);
// ErrKeyReuse when the key was first used with another payload;
// ErrInvalidLease for a lease that is not positive; ctx's error when ctx is
// done before the commit; ErrClosed after Close; and the bad input errors of
// Apply. Each comes wrapped in a *RequestError naming the handler and key.
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
		// A step that answered from the mark leaves its kind set; a taken
		// claim leaves it outcomeNone.
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
	if o.kind == outcomeDuplicate {
		c.mu.state, c.mu.result = claimDone, res
	}
	return c, nil
}

// errAnswered ends a claim's step that wrote nothing because the mark,
// read again under the write lock, already answered the request (o holds
// the answer).
var errAnswered = errors.New("oncekv: answered from the mark")

// errUserExit ends the step of a Complete whose effect panicked or called
// runtime.Goexit; commitStep raises either again in Complete's caller.
var errUserExit = errors.New("oncekv: the effect panicked or called runtime.Goexit")

// commitStep runs step, a claim's write, through the group commit as o's,
// so that concurrent claims share commits (and fsyncs) with each other and
// with Apply. It returns o's error once o is settled, after raising again,
// in the caller's goroutine, a panic or a runtime.Goexit of Complete's
// effect.
func (db *DB) commitStep(o *op, step func(w *writeTx) error) error {
	o.step = step
	db.group.submit(o)
	if o.panicVal != nil || o.goexit {
		// Complete's effect: an effect error, as for Apply (see finish).
		// A runtime.Goexit on this goroutine never gets here: runEffect
		// counted it.
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

// decideStep runs o's step in w, for decideOne. Like Apply's ops, a step
// that succeeded (or answered from the mark) stays tentative until the
// commit; one that failed is settled with its error, and reported for undo,
// since it may have written part of its change: the transaction then runs
// again without it.
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
// lock, answers o: a concurrent writer may have claimed or applied it since
// the snapshot.
func (c *Claim) take(w *writeTx, o *op, lease time.Duration) error {
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
		LeaseUntil:  leaseEnd(w.now, lease),
		Token:       token,
		FirstSeen:   w.now.UnixNano(),
	}
	if found != nil {
		// Taking over an expired or released claim: the mark stays in the
		// window where the key was first seen, unless it would expire there
		// before the new lease ends.
		mark.FirstSeen = found.FirstSeen
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

// leaseEnd is now+lease in Unix nanoseconds, saturated rather than wrapped
// around: an overflow would make a huge lease already expired.
func leaseEnd(now time.Time, lease time.Duration) int64 {
	n := now.UnixNano()
	if n > 0 && int64(lease) > math.MaxInt64-n {
		return math.MaxInt64
	}
	return n + int64(lease)
}

// Key returns the idempotency key to hand the external system with the
// call: 64 lowercase hex digits, the SHA-256 of the request's Handler and
// Key (length-prefixed, so no two pairs share one). It is the same for
// every claim of (Handler, Key): in every worker and process, before and
// after a takeover, across restarts, and for a claim whose key was already
// done; and it differs between pairs. The external system deduplicates on
// it, so a call repeated after a worker died between the call and Complete
// does nothing twice. Its fixed length and alphabet fit what gateways
// accept as an idempotency key (Stripe takes up to 255 characters).
func (c *Claim) Key() string {
	if c == nil {
		return ""
	}
	return c.key
}

// claimKey is Claim.Key of the mark key mkey.
func claimKey(mkey []byte) string { return markid.ClaimKey(mkey) }

// Token returns the claim's fencing token: unique in the store, and
// strictly greater than the token of any claim of the key before it. Hand
// it to the external system as a fence it checks for the claim's Key (or
// to Bucket.PutFenced): it refuses a zombie's late call. Never use it as
// the idempotency key: a takeover mints a new one, so the far side would
// take the retry for a new operation (use Key). It is 0 for a claim whose
// key was already done.
func (c *Claim) Token() uint64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.token
}

// Done reports whether the key is done: it was already DONE when claimed (a
// duplicate; do not run the effect), or this claim has completed it.
// Result then holds the stored result.
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

// LeaseUntil returns when the claim's lease runs out, as of its last Claim
// or Extend; the zero time once the claim no longer holds the key. External
// work still running then may be taken over, and should stop or Extend.
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

// Extend moves the end of the lease to lease from now (which may also
// shorten it), for a holder whose external work takes longer than planned.
//
// Errors: ErrFenced once another worker has taken the key over (nothing is
// changed; give up the work); ErrClaimDone after Complete or Fail;
// ErrInvalidLease for a lease that is not positive; ctx's error; ErrClosed.
func (c *Claim) Extend(ctx context.Context, lease time.Duration) error {
	var bad error
	if lease <= 0 {
		bad = fmt.Errorf("%w, got %v", ErrInvalidLease, lease)
	}
	return c.wrap(c.run(func() error {
		var until int64
		err := c.updateLocked(ctx, outcomeNone, bad, nil, func(w *writeTx, _ *op, m *layout.FoundMark) error {
			mark := m.Mark
			mark.LeaseUntil = leaseEnd(w.now, lease)
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

// Complete records the key DONE with response, which every duplicate gets
// back from then on, and returns the result. effect, when not nil, runs in
// the same write transaction on the user buckets, so its writes and the
// DONE mark commit together or not at all: the local half of the work
// (marking the order paid, keeping the gateway's receipt).
//
// If effect returns an error, nothing is written, the claim still holds the
// key, and the error is returned: call Complete again, or Fail. If the error
// is wrapped with Permanent, the key is recorded FAILED instead, as Apply
// would, and a *FailedError is returned.
//
// If effect panics, the panic is raised again in the caller; if it calls
// runtime.Goexit, the caller exits. Either way nothing is written and the
// claim still holds the key.
//
// Concurrent Completes (and Claims, Extends, Fails and Apply calls) share
// commits, as Apply's do, so effect runs on a goroutine of oncekv's and,
// as Apply's effect, may run more than once: when another call of the same
// commit fails, the commit runs again without it. Only the run that
// commits leaves changes, so effect must change nothing outside tx.
//
// Errors: ErrFenced once another worker has taken the key over (nothing is
// changed, effect does not run); ErrClaimDone when the claim was done
// already (Done, or after Complete or Fail); ErrResponseTooLarge when
// response is larger than a mark can hold (nothing is changed, effect does
// not run, the claim still holds the key); ctx's error when ctx was done
// before the commit, including while waiting for the write lock; ErrClosed.
func (c *Claim) Complete(ctx context.Context, response []byte, effect func(tx *Tx) error) (Result, error) {
	var res Result
	var done *op
	err := c.run(func() error {
		resp := bytes.Clone(response) // the caller may reuse response at once
		var first int64
		err := c.updateLocked(ctx, outcomeApplied, c.db.checkResponse(len(resp)), effect, func(w *writeTx, o *op, m *layout.FoundMark) error {
			done = o
			mark := m.Mark
			mark.State, mark.Response, mark.LeaseUntil = layout.Done, resp, 0
			first = m.FirstSeen
			_, err := w.rewriteMark(m.Window, c.mkey, &mark)
			return err
		})
		if IsPermanent(err) {
			// The effect failed for good: record that, as Apply would.
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

// Fail ends the claim after the external work failed, by err's kind:
//
//   - Permanent(err): no retry can fix it (a 400 or 422 from upstream). The
//     key is recorded FAILED with err's message, and every later Claim or
//     Apply of it gets a *FailedError back.
//   - any other error, nil included: the failure may pass (a timeout, a
//     503). The key is released at once, not when the lease would have
//     run out, so an immediate retry can claim or apply it; it stays bound
//     to its payload.
//
// Fail returns nil once the failure is recorded or the key released. err
// is looked into (errors.As for Permanent, Error for the message) on the
// caller's goroutine: if that panics, Fail panics and changes nothing.
// Errors: ErrFenced once another worker has taken the key over (nothing is
// changed); ErrClaimDone after Complete or Fail; ErrResponseTooLarge for a
// permanent error whose message is larger than a mark can hold (nothing is
// changed); ctx's error; ErrClosed.
func (c *Claim) Fail(ctx context.Context, err error) error {
	return c.wrap(c.run(func() error { return c.failLocked(ctx, err) }))
}

func (c *Claim) failLocked(ctx context.Context, cause error) error {
	// Look into the caller's error here, on the caller's goroutine and
	// outside the transaction: a panic in its methods is the caller's own,
	// and c.mu and the write lock are released by defers.
	permanent := IsPermanent(cause)
	kind := outcomeEffectError
	var msg string
	var bad error
	if permanent {
		kind, msg = outcomeFailedRecorded, cause.Error()
		bad = c.db.checkResponse(len(msg))
	}
	err := c.updateLocked(ctx, kind, bad, nil, func(w *writeTx, _ *op, m *layout.FoundMark) error {
		mark := m.Mark
		if permanent {
			mark.State, mark.Error, mark.LeaseUntil = layout.Failed, msg, 0
		} else {
			mark.LeaseUntil = releasedLease
			return w.putMark(m.Window, c.mkey, &mark) // released: nothing to outlive
		}
		_, err := w.rewriteMark(m.Window, c.mkey, &mark)
		return err
	})
	switch {
	case err != nil:
	case permanent:
		c.mu.state = claimFailed
	default:
		c.mu.state = claimReleased
	}
	return err
}

// effectError carries an error of Complete's effect out of the
// transaction, so it is told apart from the store's own errors.
type effectError struct{ err error }

// stepEffect runs o's effect, if any, in w (see runEffect: on a goroutine
// of its own when o shares its commit, its panic or Goexit recorded in o,
// its OnCommit hooks in o.hooks).
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

// updateLocked runs fn on the key's mark in a write transaction, if c still
// holds the key and bad, an input error found by the caller, is nil. It
// counts the outcome: kind on success. The caller holds c.mu.
//
// The write rides the group commit (commitStep), so it may share its
// commit with other claims and Apply calls, and run again when one of them
// fails; fn then sees a fresh transaction and must set nothing that the
// last run does not set again. effect, when not nil, is Complete's: it runs
// in o, after the check that c holds the key and before fn, as an Apply
// effect would (runEffect).
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
