package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncekv/oncekv"
)

// Claim is the two-phase form of Apply, for an effect that cannot join
// the store's transaction (a payment gateway, an e-mail), as
// oncekv.Claim is on the embedded store: Store.Claim marks the key
// IN_PROGRESS under a lease and a fencing token, and the holder records
// the outcome with Complete or Fail. Hand the external system Key (stable
// across retries, takeovers and hosts: it deduplicates on it) and Token
// (greater at every takeover: it fences a zombie off with it).
//
// Leases are on the store's clock (the database's, for every host). Once
// a lease has run out, the next Claim or Apply of the key, on any host,
// takes it over with a strictly greater token, and from then on the old
// holder's Extend, Complete and Fail return oncekv.ErrFenced (a
// *oncekv.FenceError with both tokens) and change nothing. A Claim is safe
// for concurrent use; its operations run one at a time.
type Claim struct {
	s   *Store
	req oncekv.Request // Handler and Key only, for errors
	id  ident

	mu struct {
		sync.Mutex
		state      claimState
		token      uint64
		leaseUntil time.Time
		result     oncekv.Result
		lost       error // the ErrFenced that ended the claim, repeated to every later call
		// prev is the attempt the claim took over, nil for a first one.
		prev *oncekv.Attempt
	}
}

type claimState uint8

const (
	claimHeld claimState = iota
	claimDone
	claimFailed
	claimReleased
	claimParked // this claim parked the key (ClaimWith's probe)
)

// Claim claims req's key for an effect outside the store, for lease.
//
// When the key is free, or held by a claim whose lease has run out (or
// that was released), it writes the mark IN_PROGRESS with the lease's end
// and a token drawn from the schema's sequence, and returns a claim that
// holds the key once that transaction has committed: the token is never
// handed out for a claim that did not commit, and each is strictly
// greater than every token drawn before it, on any host. When the key is
// DONE, it returns a claim whose Done is true and whose Result is the
// stored one (one plain read, no lock); when it FAILED, the recorded
// *oncekv.FailedError.
//
// Errors: oncekv.ErrInProgress at once while another claim's lease is
// live (an *oncekv.InProgressError with its end) or another transaction
// holds the key (without a lease end); oncekv.ErrKeyReuse;
// oncekv.ErrInvalidLease for a lease that is not positive; ctx's error;
// oncekv.ErrClosed; the bad input errors of Apply. Each comes wrapped in
// an *oncekv.RequestError naming the handler and key.
func (s *Store) Claim(ctx context.Context, req oncekv.Request, lease time.Duration) (*Claim, error) {
	if !s.enter() {
		return nil, oncekv.ErrClosed
	}
	defer s.exit()
	if err := ctx.Err(); err != nil {
		s.stats.count(outcomeAborted)
		return nil, requestError("claim", &req, err)
	}
	o, err := s.newOp(&req, nil)
	if err == nil && lease <= 0 {
		err = fmt.Errorf("%w, got %v", oncekv.ErrInvalidLease, lease)
	}
	if err != nil {
		s.stats.count(outcomeInvalid)
		return nil, requestError("claim", &req, err)
	}
	c := &Claim{s: s, req: oncekv.Request{Handler: req.Handler, Key: req.Key}, id: o.id}
	err = s.answerFromMarks(ctx, []*op{o})
	if err == nil && !o.settled {
		err = c.take(ctx, o, lease)
	}
	if err != nil {
		o.fail(outcomeAborted, err)
	}
	res, err := s.settle(ctx, o)
	if err != nil {
		var re *oncekv.RequestError
		if errors.As(err, &re) {
			re.Op = "claim"
		}
		return nil, err
	}
	switch {
	case o.kind == outcomeDuplicate:
		c.mu.state, c.mu.result = claimDone, res
	case c.mu.prev != nil:
		s.stats.takeovers.Add(1)
	}
	return c, nil
}

// take claims the key in a transaction, unless its mark, read again
// under the key's lock, answers o.
func (c *Claim) take(ctx context.Context, o *op, lease time.Duration) error {
	s := c.s
	tx, w, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it does nothing
	held, err := s.lockAndRead(ctx, tx, []*op{o})
	if err != nil {
		return err
	}
	k := held[o.id.claimKey]
	switch {
	case k.found != nil && o.answer(k.found, w.now):
		return nil
	case !k.locked:
		o.fail(outcomeInProgress, errBusy)
		return nil
	}
	token, err := s.nextToken(ctx, tx)
	if err != nil {
		return err
	}
	m := &mark{state: stateInProgress, firstSeen: w.now, win: w.cur, fp: o.id.fp, leaseUntil: leaseEnd(w.now, lease), token: token}
	var prev *oncekv.Attempt
	if k.found != nil {
		// A takeover keeps the key's first-seen time, and records this
		// attempt's start and count; the attempt taken over is kept for
		// TakenOver.
		m.firstSeen = k.found.firstSeen
		m.takeovers, m.attemptStart = k.found.takeovers+1, w.now
		a := k.found.attempt(o.req)
		a.Takeovers = int(m.takeovers)
		prev = &a
	}
	w.put(o, m, k.found)
	if err := s.commit(ctx, tx, w); err != nil {
		return err
	}
	// c is not shared yet, so its fields need no lock.
	c.mu.token, c.mu.leaseUntil, c.mu.prev = token, timeFromNano(m.leaseUntil), prev
	return nil
}

// Key returns the idempotency key to hand the external system: 64
// lowercase hex digits, the SHA-256 of the request's Handler and Key, the
// same as oncekv.Claim.Key of the embedded store for the same pair, on
// every host, across takeovers and restarts.
func (c *Claim) Key() string {
	if c == nil {
		return ""
	}
	return c.id.claimKey
}

// Token returns the claim's fencing token (0 for a claim whose key was
// already done): strictly greater than the token of every claim of the
// key before it. Never use it as the idempotency key: a takeover mints a
// new one.
func (c *Claim) Token() uint64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.token
}

// Done reports whether the key is done: it was already DONE when claimed,
// or this claim completed it. Result then holds the stored result.
func (c *Claim) Done() bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.state == claimDone
}

// Result returns the key's stored result once Done is true, and the zero
// Result before. Its Response is the caller's.
func (c *Claim) Result() oncekv.Result {
	if c == nil {
		return oncekv.Result{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	res := c.mu.result
	res.Response = cloneNil(res.Response)
	return res
}

// LeaseUntil returns when the claim's lease runs out, by the store's
// clock, as of its last Claim or Extend; the zero time once the claim no
// longer holds the key.
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
// shorten it).
//
// Errors: oncekv.ErrFenced once another worker took the key over (nothing
// changed; give the work up); oncekv.ErrClaimDone after Complete or Fail;
// oncekv.ErrInvalidLease; ctx's error; oncekv.ErrClosed.
func (c *Claim) Extend(ctx context.Context, lease time.Duration) error {
	var bad error
	if lease <= 0 {
		bad = fmt.Errorf("%w, got %v", oncekv.ErrInvalidLease, lease)
	}
	return c.wrap(c.run(func() error {
		var until int64
		err := c.updateLocked(ctx, outcomeNone, bad, nil, func(w *writes, m *mark) {
			m.leaseUntil = leaseEnd(w.now, lease)
			until = m.leaseUntil
		})
		if err == nil {
			c.mu.leaseUntil = timeFromNano(until)
		}
		return err
	}))
}

// Complete records the key DONE with response, which every duplicate gets
// back from then on, and returns the result. effect, when not nil, runs
// in the same transaction, so its writes and the DONE mark commit
// together or not at all.
//
// If effect returns an error, nothing is written, the claim still holds
// the key, and the error is returned; wrapped with oncekv.Permanent, the
// key is recorded FAILED instead and a *oncekv.FailedError is returned. If
// effect panics, nothing is written and the panic is raised again.
//
// Errors: oncekv.ErrFenced once another worker took the key over (nothing
// changed; effect does not run); oncekv.ErrClaimDone;
// oncekv.ErrResponseTooLarge (nothing changed, the claim still holds the
// key); ctx's error; oncekv.ErrClosed.
func (c *Claim) Complete(ctx context.Context, response []byte, effect func(ctx context.Context, tx pgx.Tx) error) (oncekv.Result, error) {
	var res oncekv.Result
	err := c.run(func() error {
		resp := cloneNil(response)
		var first int64
		err := c.updateLocked(ctx, outcomeApplied, c.s.checkResponse(len(resp)), effect, func(_ *writes, m *mark) {
			m.state, m.response, m.leaseUntil, m.attemptStart = stateDone, resp, 0, 0
			first = m.firstSeen
		})
		if oncekv.IsPermanent(err) {
			if ferr := c.failLocked(ctx, err); ferr != nil {
				return ferr
			}
			return oncekv.NewFailedError(err.Error(), err)
		}
		if err == nil {
			c.mu.state, c.mu.result = claimDone, oncekv.Result{Response: resp, FirstSeen: timeFromNano(first)}
			res = c.mu.result
			res.Response = cloneNil(resp)
		}
		return err
	})
	return res, c.wrap(err)
}

// Fail ends the claim after the external work failed, by err's kind: a
// permanent error (oncekv.Permanent) records the key FAILED with err's
// message, replayed to every later Claim and Apply; any other error, nil
// included, releases the key at once, so a retry can claim or apply it
// without waiting for the lease.
//
// Errors: oncekv.ErrFenced once another worker took the key over (nothing
// changed); oncekv.ErrClaimDone; oncekv.ErrResponseTooLarge for a
// permanent error's message over MaxResponseSize; ctx's error;
// oncekv.ErrClosed.
func (c *Claim) Fail(ctx context.Context, err error) error {
	return c.wrap(c.run(func() error { return c.failLocked(ctx, err) }))
}

func (c *Claim) failLocked(ctx context.Context, cause error) error {
	permanent := oncekv.IsPermanent(cause)
	kind := outcomeEffectError
	var msg string
	var bad error
	if permanent {
		kind, msg = outcomeFailedRecorded, cause.Error()
		bad = c.s.checkResponse(len(msg))
	}
	if !permanent {
		return c.releaseLocked(ctx, kind)
	}
	err := c.updateLocked(ctx, kind, bad, nil, func(_ *writes, m *mark) {
		m.state, m.errMsg, m.leaseUntil, m.attemptStart = stateFailed, msg, 0, 0
	})
	if err == nil {
		c.mu.state = claimFailed
	}
	return err
}

// releaseLocked releases the key, for any Claim or Apply to take over at
// once, counting kind.
func (c *Claim) releaseLocked(ctx context.Context, kind outcome) error {
	err := c.updateLocked(ctx, kind, nil, nil, func(_ *writes, m *mark) { m.leaseUntil = releasedLease })
	if err == nil {
		c.mu.state = claimReleased
	}
	return err
}

// run calls fn with c locked, while the store is open.
func (c *Claim) run(fn func() error) error {
	if c == nil || c.s == nil {
		return oncekv.ErrUnknownClaim
	}
	if !c.s.enter() {
		return oncekv.ErrClosed
	}
	defer c.s.exit()
	c.mu.Lock()
	defer c.mu.Unlock()
	return fn()
}

// errEffect carries an error of Complete's effect out of the transaction,
// so it is told apart from the store's own.
type errEffect struct{ err error }

func (e *errEffect) Error() string { return e.err.Error() }

// updateLocked rewrites the key's mark with change, in a transaction that
// waits for the key's lock (a holder's step waits for whoever holds the
// key right now: a duplicate being refused, or a taker), if c still holds
// the key and bad, an input error found by the caller, is nil. effect,
// Complete's, runs first in the same transaction. It counts the outcome:
// kind on success. The caller holds c.mu.
func (c *Claim) updateLocked(ctx context.Context, kind outcome, bad error, effect func(context.Context, pgx.Tx) error, change func(w *writes, m *mark)) error {
	return c.writeLocked(ctx, kind, bad, effect, nil, change)
}

// writeLocked is updateLocked with guard, which runs in the transaction
// once the key is known to be held, and whose error (returned as it is)
// rolls it back with nothing changed.
func (c *Claim) writeLocked(ctx context.Context, kind outcome, bad error, effect, guard func(context.Context, pgx.Tx) error, change func(w *writes, m *mark)) error {
	err := bad
	switch {
	case err != nil:
	case c.mu.lost != nil:
		err = c.mu.lost
	case c.mu.state != claimHeld:
		err = oncekv.ErrClaimDone
	default:
		err = c.step(ctx, effect, guard, change)
	}
	var ee *errEffect
	switch {
	case err == nil:
	case errors.As(err, &ee):
		err, kind = ee.err, outcomeEffectError
		if oncekv.IsPermanent(err) {
			kind = outcomeNone // counted when the failure is recorded
		}
	case errors.Is(err, oncekv.ErrFenced):
		c.mu.lost, kind = err, outcomeFenced
	case errors.Is(err, oncekv.ErrClaimDone), errors.Is(err, oncekv.ErrInvalidLease), errors.Is(err, oncekv.ErrResponseTooLarge):
		kind = outcomeInvalid
	case errors.Is(err, oncekv.ErrParkFull):
		kind = outcomeParkRefused
	default:
		kind = outcomeAborted
	}
	c.s.stats.count(kind)
	return err
}

// step is updateLocked's transaction.
func (c *Claim) step(ctx context.Context, effect, guard func(context.Context, pgx.Tx) error, change func(w *writes, m *mark)) error {
	s := c.s
	tx, w, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it does nothing
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", c.id.lock); err != nil {
		return err
	}
	o := &op{req: &c.req, id: c.id}
	m, err := s.lookup(ctx, tx, []*op{o})
	if err != nil {
		return err
	}
	if err := c.heldBy(m[0]); err != nil {
		return err
	}
	if guard != nil {
		if err := guard(ctx, tx); err != nil {
			return err
		}
	}
	if effect != nil {
		o.effect = func(ctx context.Context, tx pgx.Tx) ([]byte, error) { return nil, effect(ctx, tx) }
		r := callEffect(ctx, tx, o)
		switch {
		case o.panicVal != nil:
			panic(o.panicVal) // the deferred rollback undoes it
		case r.err != nil:
			return &errEffect{r.err}
		case tx.Conn().PgConn().TxStatus() == 'E':
			return &errEffect{errAborted}
		}
	}
	old := *m[0]
	next := old
	change(w, &next)
	switch {
	case next.state == stateGone:
		w.drops = append(w.drops, rewrite{id: &o.id, from: old.win})
	case next.leaseUntil == releasedLease:
		next.win = old.win // released: nothing to outlive, the mark stays
		w.rewrites = append(w.rewrites, rewrite{id: &o.id, from: old.win, m: &next})
	default:
		w.put(o, &next, &old)
	}
	return s.commit(ctx, tx, w)
}

// heldBy returns nil if m shows that c still holds the key, and ErrFenced
// with the reason if not.
func (c *Claim) heldBy(m *mark) error {
	switch {
	case m == nil:
		return fmt.Errorf("%w: the key's mark is gone (its window expired)", oncekv.ErrFenced)
	case m.state == stateInProgress && m.token == c.mu.token:
		return nil
	case m.token > c.mu.token:
		return &oncekv.FenceError{Stored: m.token, Presented: c.mu.token}
	}
	return fmt.Errorf("%w: the key was taken over and is now %s", oncekv.ErrFenced, stateName(m.state))
}

// wrap names the claim's handler and key in err.
func (c *Claim) wrap(err error) error {
	if c == nil {
		return err
	}
	return requestError("claim", &c.req, err)
}

func stateName(s int16) string {
	switch s {
	case stateInProgress:
		return "IN_PROGRESS"
	case stateDone:
		return "DONE"
	case stateFailed:
		return "FAILED"
	case stateParked:
		return "PARKED"
	}
	return fmt.Sprintf("state %d", s)
}
