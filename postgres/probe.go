package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncekv/oncekv"
)

// ClaimWith is Claim with opts (nil for none), as oncekv.DB.ClaimWith is
// on the embedded store, with the same oncekv.ClaimOptions: with
// opts.Probe, a claim that takes its key over from an earlier attempt
// that recorded no outcome (Claim.TakenOver: its lease ran out, it was
// released, or its host died) asks the probe before the caller runs the
// effect again, outside any transaction and holding the new claim's
// lease:
//
//   - oncekv.OutcomeApplied records the key DONE with the probe's
//     response: the Claim returned is Done, its Result that response with
//     Duplicate set, and the caller runs nothing.
//   - oncekv.OutcomeNotApplied returns the claim, which the caller goes on
//     with.
//   - oncekv.OutcomeUnknown (and any other value) parks the key and returns
//     an *oncekv.ParkedError: on every host, Apply, Claim and every
//     duplicate get oncekv.ErrParked, and expiry keeps the mark, until an
//     operator resolves it (Store.Parked, Store.ResolveParked). With
//     Options.MaxParked keys parked in the schema already, it returns
//     oncekv.ErrParkFull and the key stays claimable.
//
// A probe's error, panic or runtime.Goexit releases the claim, for the
// next takeover to probe again; the error is returned wrapped, the panic
// and Goexit go on in the caller. A first attempt, or a key found DONE,
// runs no probe. Apply takes over an expired claim without a probe: give
// a probed handler's keys to ClaimWith only.
//
// Errors: Claim's, oncekv.ErrParked (an *oncekv.ParkedError),
// oncekv.ErrParkFull, the probe's (wrapped), oncekv.ErrResponseTooLarge
// for the probe's response, and oncekv.ErrFenced when another worker took
// the key over while the probe ran; each in an *oncekv.RequestError.
func (s *Store) ClaimWith(ctx context.Context, req oncekv.Request, lease time.Duration, opts *oncekv.ClaimOptions) (*Claim, error) {
	c, err := s.Claim(ctx, req, lease)
	if err != nil || opts == nil || opts.Probe == nil {
		return c, err
	}
	prev, taken := c.TakenOver()
	if !taken {
		return c, nil
	}
	if err := c.probe(ctx, opts.Probe, prev); err != nil {
		return nil, err
	}
	return c, nil
}

// TakenOver reports whether the claim took its key over from an earlier
// attempt that recorded no outcome (its lease ran out, it was released
// by Claim.Fail, or its host died), and that attempt: the earlier attempt
// may have made its external call, so look before acting again (or use
// ClaimWith with a Probe). False for a key's first claim and for a claim
// found Done.
func (c *Claim) TakenOver() (oncekv.Attempt, bool) {
	if c == nil {
		return oncekv.Attempt{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.prev == nil {
		return oncekv.Attempt{}, false
	}
	return *c.mu.prev, true
}

// probe asks p about prev and acts on its answer.
func (c *Claim) probe(ctx context.Context, p oncekv.Probe, prev oncekv.Attempt) error {
	outcome, resp, perr := c.askProbe(ctx, p, prev)
	return c.wrap(c.run(func() error {
		switch {
		case perr != nil:
			c.letGoLocked(ctx, outcomeEffectError)
			return fmt.Errorf("oncekv: probe: %w", perr)
		case outcome == oncekv.OutcomeNotApplied:
			return nil
		case outcome == oncekv.OutcomeApplied:
			return c.recordProbedLocked(ctx, resp)
		}
		return c.parkLocked(ctx, prev)
	}))
}

// askProbe runs p. A panic or runtime.Goexit of p releases the claim on
// the way out, so that the next takeover probes again without waiting for
// the lease.
func (c *Claim) askProbe(ctx context.Context, p oncekv.Probe, prev oncekv.Attempt) (outcome oncekv.Outcome, resp []byte, err error) {
	returned := false
	defer func() {
		if !returned {
			_ = c.run(func() error { c.letGoLocked(ctx, outcomeEffectError); return nil })
		}
	}()
	outcome, resp, err = p(ctx, c.id.claimKey, prev)
	returned = true
	return outcome, resp, err
}

// recordProbedLocked records the key DONE with resp, the probe's answer
// that the attempt taken over applied its effect.
func (c *Claim) recordProbedLocked(ctx context.Context, resp []byte) error {
	resp = cloneNil(resp)
	var first int64
	err := c.updateLocked(ctx, outcomeProbeApplied, c.s.checkResponse(len(resp)), nil, func(_ *writes, m *mark) {
		m.state, m.response, m.leaseUntil, m.attemptStart = stateDone, resp, 0, 0
		first = m.firstSeen
	})
	if err != nil {
		c.letGoLocked(ctx, outcomeNone)
		return err
	}
	c.mu.state, c.mu.result = claimDone, oncekv.Result{Response: resp, Duplicate: true, FirstSeen: timeFromNano(first)}
	return nil
}

// parkLocked parks the key: its mark becomes PARKED, in the newest
// window, recording prev, the attempt in doubt, unless Options.MaxParked
// keys are parked already. The count is taken under the schema's park
// lock, so that hosts parking at once do not pass the cap together.
func (c *Claim) parkLocked(ctx context.Context, prev oncekv.Attempt) error {
	s := c.s
	started := prev.Started.UnixNano()
	limit := max(s.opts.MaxParked, 0)
	guard := func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, $2)", lockSpace, schemaLock(s.opts.Schema, "park")); err != nil {
			return err
		}
		var n int64
		if err := tx.QueryRow(ctx, s.q.countParked).Scan(&n); err != nil {
			return err
		}
		if n >= int64(limit) {
			return fmt.Errorf("%w (%d, Options.MaxParked)", oncekv.ErrParkFull, n)
		}
		return nil
	}
	err := c.writeLocked(ctx, outcomeParked, nil, nil, guard, func(w *writes, m *mark) {
		m.state, m.leaseUntil, m.token, m.attemptStart, m.parkedAt = stateParked, 0, prev.Token, started, w.now
		if started == m.firstSeen {
			m.attemptStart = 0 // the key's first attempt (see mark)
		}
	})
	attrs := []slog.Attr{slog.String("handler", c.req.Handler), slog.String("key", c.req.Key),
		slog.Uint64("token", prev.Token), slog.Time("started", prev.Started), slog.Int("takeovers", prev.Takeovers)}
	switch {
	case errors.Is(err, oncekv.ErrParkFull):
		s.log.LogAttrs(ctx, slog.LevelError, "cannot park a key whose earlier attempt is in doubt: Options.MaxParked keys are parked; "+
			"the key stays claimable and its next takeover probes again", append(attrs, slog.Int("max_parked", limit))...)
		c.letGoLocked(ctx, outcomeNone)
		return err
	case err != nil:
		c.letGoLocked(ctx, outcomeNone)
		return err
	}
	c.mu.state = claimParked
	s.log.LogAttrs(ctx, slog.LevelWarn, "key parked: the probe cannot tell whether an earlier attempt applied its effect; resolve it", attrs...)
	return &oncekv.ParkedError{Attempt: prev}
}

// letGoLocked releases the key, if c still holds it, after the probe could
// not settle it; kind is counted. It never fails the call: a claim it
// cannot release runs out with its lease.
func (c *Claim) letGoLocked(ctx context.Context, kind outcome) {
	if c.mu.state == claimHeld && c.mu.lost == nil {
		_ = c.releaseLocked(context.WithoutCancel(ctx), kind)
	}
}
