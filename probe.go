package oncekv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/oncekv/oncekv/internal/layout"
)

// Attempt is an earlier attempt at a key that recorded no outcome: the
// one a claim took over (Claim.TakenOver), or the one a parked key waits
// on (ParkedError).
type Attempt struct {
	// Handler and Key are the request's; the probe's key argument is
	// Claim.Key, the idempotency key the external system was handed.
	Handler, Key string
	// Token is the attempt's fencing token, as the external system may
	// have seen it.
	Token uint64
	// Started is when the attempt took the key.
	Started time.Time
	// Takeovers is how many times the key has been taken over, the one at
	// hand included: 1 the first time.
	Takeovers int
}

// attemptOf is the attempt m records, of req's key.
func attemptOf(req *Request, m *layout.Mark) Attempt {
	started := m.AttemptStart
	if started == 0 {
		started = m.FirstSeen // the key's first attempt
	}
	return Attempt{Handler: req.Handler, Key: req.Key, Token: m.Token, Started: timeFromNano(started), Takeovers: int(m.Takeovers)}
}

// Outcome is a probe's answer about an earlier attempt.
type Outcome uint8

// The outcomes. The zero value is OutcomeUnknown, so a probe that cannot
// tell parks the key rather than risk a second effect or a lost one.
const (
	// OutcomeUnknown: the external system cannot say (its status API is
	// down, the call may still be in flight). The key is parked.
	OutcomeUnknown Outcome = iota
	// OutcomeApplied: the earlier attempt's effect happened. The key is
	// recorded DONE with the probe's response, and nothing runs again.
	OutcomeApplied
	// OutcomeNotApplied: the effect did not happen. The claim goes on and
	// the caller runs it.
	OutcomeNotApplied
)

// String returns "unknown", "applied" or "not applied".
func (o Outcome) String() string {
	switch o {
	case OutcomeUnknown:
		return "unknown"
	case OutcomeApplied:
		return "applied"
	case OutcomeNotApplied:
		return "not applied"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Probe asks the external system whether prev, an earlier attempt at the
// key that recorded no outcome, applied its effect: key is Claim.Key, the
// idempotency key that attempt handed over. It returns the outcome and,
// for OutcomeApplied, the response to record (what Complete would have
// been given). It must not apply the effect itself. An error leaves the
// key claimable and the next takeover probes again; any other Outcome
// than the three parks the key.
type Probe func(ctx context.Context, key string, prev Attempt) (Outcome, []byte, error)

// ClaimOptions are the options of DB.ClaimWith; the same value serves every
// claim of one handler.
type ClaimOptions struct {
	// Probe, when set, runs on every takeover before the claim is handed
	// back, outside any transaction and holding the new claim's lease.
	Probe Probe
}

// ClaimWith is Claim with opts (nil for none): with opts.Probe, a claim that
// takes its key over from an earlier attempt that recorded no outcome
// (Claim.TakenOver) asks the probe before the caller runs the effect again:
//
//   - OutcomeApplied records the key DONE with the probe's response: the
//     Claim returned is Done, its Result that response with Duplicate set,
//     and the caller runs nothing.
//   - OutcomeNotApplied returns the claim, which the caller goes on with.
//   - OutcomeUnknown parks the key and returns a *ParkedError: nothing runs
//     and nothing is dropped until an operator resolves it (DB.Parked,
//     DB.ResolveParked, `oncekv parked`, `oncekv resolve`); Apply, Claim and
//     every duplicate get ErrParked meanwhile. With Options.MaxParked keys
//     parked already, it returns ErrParkFull and the key stays claimable.
//
// A probe's error, panic or runtime.Goexit releases the claim, for the next
// takeover to probe again; the error is returned wrapped, the panic and
// Goexit go on in the caller. A first attempt, or a key found DONE, runs
// no probe. Apply and Tx.Mark take over an expired claim without a probe:
// give a probed handler's keys to ClaimWith only (docs/design/probe.md).
//
// Errors: Claim's, ErrParked (a *ParkedError), ErrParkFull, the probe's
// (wrapped), and ErrFenced when another worker took the key over while the
// probe ran; each in a *RequestError.
func (db *DB) ClaimWith(ctx context.Context, req Request, lease time.Duration, opts *ClaimOptions) (*Claim, error) {
	c, err := db.Claim(ctx, req, lease)
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

// probe asks p about prev and acts on its answer.
func (c *Claim) probe(ctx context.Context, p Probe, prev Attempt) error {
	outcome, resp, perr := c.askProbe(ctx, p, prev)
	return c.wrap(c.run(func() error {
		switch {
		case perr != nil:
			c.letGoLocked(ctx, outcomeEffectError)
			return fmt.Errorf("oncekv: probe: %w", perr)
		case outcome == OutcomeNotApplied:
			return nil
		case outcome == OutcomeApplied:
			return c.recordProbedLocked(ctx, resp)
		}
		return c.parkLocked(ctx, prev)
	}))
}

// askProbe runs p. A panic or runtime.Goexit of p releases the claim on
// the way out, so that the next takeover probes again without waiting for
// the lease.
func (c *Claim) askProbe(ctx context.Context, p Probe, prev Attempt) (outcome Outcome, resp []byte, err error) {
	returned := false
	defer func() {
		if !returned {
			_ = c.run(func() error { c.letGoLocked(ctx, outcomeEffectError); return nil })
		}
	}()
	outcome, resp, err = p(ctx, c.key, prev)
	returned = true
	return outcome, resp, err
}

// recordProbedLocked records the key DONE with resp, the probe's answer
// that the attempt taken over applied its effect.
func (c *Claim) recordProbedLocked(ctx context.Context, resp []byte) error {
	resp = bytes.Clone(resp)
	first, _, err := c.doneLocked(ctx, outcomeProbeApplied, resp, nil)
	if err != nil {
		c.letGoLocked(ctx, outcomeNone)
		return err
	}
	c.mu.state, c.mu.result = claimDone, Result{Response: resp, Duplicate: true, FirstSeen: timeFromNano(first)}
	return nil
}

// parkLocked parks the key: its mark becomes PARKED, recording prev, the
// attempt in doubt, and the parked keys' index learns it, unless
// Options.MaxParked keys are parked already.
func (c *Claim) parkLocked(ctx context.Context, prev Attempt) error {
	db := c.db
	started := prev.Started.UnixNano()
	err := c.updateLocked(ctx, outcomeParked, nil, nil, func(w *writeTx, _ *op, m *layout.FoundMark) error {
		if n := layout.CountParked(w.btx); n >= uint64(max(db.opts.MaxParked, 0)) {
			return fmt.Errorf("%w (%d, Options.MaxParked)", ErrParkFull, n)
		}
		mark := m.Mark
		mark.State, mark.LeaseUntil, mark.Token, mark.AttemptStart = layout.Parked, 0, prev.Token, started
		if started == m.FirstSeen {
			mark.AttemptStart = 0 // the key's first attempt (see layout.Mark)
		}
		to, err := w.rewriteMark(m.Window, c.mkey, &mark)
		if err != nil {
			return err
		}
		return layout.PutParked(w.btx, c.mkey, layout.ParkedEntry{Window: to, At: w.now.UnixNano()})
	})
	attrs := []slog.Attr{slog.String("handler", c.req.Handler), slog.String("key", c.req.Key),
		slog.Uint64("token", prev.Token), slog.Time("started", prev.Started), slog.Int("takeovers", prev.Takeovers)}
	switch {
	case errors.Is(err, ErrParkFull):
		db.log.LogAttrs(ctx, slog.LevelError, "cannot park a key whose earlier attempt is in doubt: Options.MaxParked keys are parked; "+
			"the key stays claimable and its next takeover probes again", append(attrs, slog.Int("max_parked", db.opts.MaxParked))...)
		c.letGoLocked(ctx, outcomeNone)
		return err
	case err != nil:
		c.letGoLocked(ctx, outcomeNone)
		return err
	}
	db.parkedKeys.Add(1)
	c.mu.state = claimParked
	db.log.LogAttrs(ctx, slog.LevelWarn, "key parked: the probe cannot tell whether an earlier attempt applied its effect; resolve it", attrs...)
	return &ParkedError{Attempt: prev}
}

// letGoLocked releases the key, if c still holds it, after the probe could
// not settle it; kind is counted. It never fails the call: a claim it
// cannot release runs out with its lease.
func (c *Claim) letGoLocked(ctx context.Context, kind outcome) {
	if c.mu.state == claimHeld && c.mu.lost == nil {
		_ = c.releaseLocked(context.WithoutCancel(ctx), kind)
	}
}

// TakenOver reports whether the claim took its key over from an earlier
// attempt that recorded no outcome (its lease ran out, it was released by
// Claim.Fail or DB.ReleaseClaim, or its process died), and that attempt:
// the earlier attempt may have made its external call, so look before
// acting again (or use ClaimWith with a Probe). False for a key's first
// claim and for a claim found Done.
func (c *Claim) TakenOver() (Attempt, bool) {
	if c == nil {
		return Attempt{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.prev == nil {
		return Attempt{}, false
	}
	return *c.mu.prev, true
}
