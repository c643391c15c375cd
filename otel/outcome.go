package otel

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncekv/oncekv"
)

// Outcome is how one call about a key ended, the oncekv.outcome attribute
// of its span. The store's answers have the names of the Prometheus
// module's oncekv_apply_total results where both exist.
type Outcome string

// The outcomes of the store's calls (Apply, ApplyBatch, Claim and its
// methods), from their result and error.
const (
	OutcomeApplied     Outcome = "applied"     // the effect committed with its mark
	OutcomeDuplicate   Outcome = "duplicate"   // answered from the stored mark; the effect did not run
	OutcomeClaimed     Outcome = "claimed"     // Claim took the key under a lease
	OutcomeExtended    Outcome = "extended"    // Claim.Extend (or Queue.Extend) moved the lease on
	OutcomeReleased    Outcome = "released"    // Claim.Fail with a transient error freed the key
	OutcomeFailed      Outcome = "failed"      // a permanent failure, recorded now or replayed (oncekv.duplicate says which)
	OutcomeInProgress  Outcome = "in_progress" // ErrInProgress: a live claim holds the key
	OutcomeKeyReuse    Outcome = "key_reuse"   // ErrKeyReuse: the key came with another payload
	OutcomeFenced      Outcome = "fenced"      // ErrFenced: another worker took the key over
	OutcomeInvalid     Outcome = "invalid"     // bad input: no handler or key, one too large, a bad lease, ...
	OutcomeAborted     Outcome = "aborted"     // the context ended first; nothing applied
	OutcomeUnavailable Outcome = "unavailable" // the store is closed, read-only or poisoned: reopen it
	OutcomeError       Outcome = "error"       // anything else: the effect's own error, a failed commit
)

// invalid lists the root's bad-input errors.
var invalid = []error{
	oncekv.ErrHandlerRequired, oncekv.ErrKeyRequired, oncekv.ErrKeyTooLarge, oncekv.ErrValueTooLarge,
	oncekv.ErrInvalidFingerprint, oncekv.ErrInvalidLease, oncekv.ErrResponseTooLarge,
}

// OutcomeOf returns the outcome of a store call that answered res and err.
// It calls only errors.Is and oncekv.Classify on err.
func OutcomeOf(res oncekv.Result, err error) Outcome {
	switch {
	case err == nil && res.Duplicate:
		return OutcomeDuplicate
	case err == nil:
		return OutcomeApplied
	case errors.Is(err, oncekv.ErrFailed):
		return OutcomeFailed
	case errors.Is(err, oncekv.ErrInProgress):
		return OutcomeInProgress
	case errors.Is(err, oncekv.ErrKeyReuse):
		return OutcomeKeyReuse
	case errors.Is(err, oncekv.ErrFenced):
		return OutcomeFenced
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return OutcomeAborted
	case oncekv.Classify(err).Action == oncekv.Reopen:
		return OutcomeUnavailable
	}
	for _, e := range invalid {
		if errors.Is(err, e) {
			return OutcomeInvalid
		}
	}
	return OutcomeError
}

// failed reports whether outcome is an error of the call: the span's status
// is then Error. A duplicate, a conflict with a live claim and the normal
// ends of a claim or a delivery are not: the store did what it promises.
func (o Outcome) failed() bool {
	switch o {
	case OutcomeFailed, OutcomeKeyReuse, OutcomeFenced, OutcomeInvalid, OutcomeAborted, OutcomeUnavailable, OutcomeError:
		return true
	}
	return false
}

// actionAttr is Classify's advice for err, in snake case.
func actionAttr(err error) attribute.KeyValue {
	return AttrAction.String(strings.ReplaceAll(oncekv.Classify(err).Action.String(), " ", "_"))
}

// SetResult records on span how a store call about key ended: its
// outcome, whether it was a duplicate (a replayed failure is one too),
// Classify's action, the age of the mark a duplicate was answered from (by
// now, the store's clock; skipped when now is zero), and, for an outcome
// that is an error, the Error status with err's message, the key in it
// replaced by its hash unless Options.RecordKeys. It does not end span.
// An interceptor that answers from the store (gRPC) calls it.
func (t *Telemetry) SetResult(span trace.Span, key string, res oncekv.Result, err error, now time.Time) {
	t.setOutcome(span, key, OutcomeOf(res, err), res, err, now)
}

// setOutcome is SetResult with the outcome decided by the caller.
func (t *Telemetry) setOutcome(span trace.Span, key string, o Outcome, res oncekv.Result, err error, now time.Time) {
	dup := res.Duplicate || replayedFailure(err)
	attrs := []attribute.KeyValue{AttrOutcome.String(string(o)), AttrDuplicate.Bool(dup), actionAttr(err)}
	if res.Duplicate && !now.IsZero() && !res.FirstSeen.IsZero() {
		attrs = append(attrs, AttrMarkAge.Float64(now.Sub(res.FirstSeen).Seconds()))
	}
	span.SetAttributes(attrs...)
	if err != nil && o.failed() {
		t.fail(span, key, err)
	}
}

// replayedFailure reports whether err is a recorded failure answered to a
// duplicate: its *FailedError exposes ErrFailed alone, where the call that
// failed exposes the original error too.
func replayedFailure(err error) bool {
	var fe *oncekv.FailedError
	return errors.As(err, &fe) && len(fe.Unwrap()) == 1
}
