package retry

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Reason says why Decide decided what it did.
type Reason int

// The reasons of a Decision. The zero Reason is ReasonSucceeded, so a zero
// Decision never retries.
const (
	// ReasonSucceeded: the cause was nil; nothing to retry.
	ReasonSucceeded Reason = iota
	// ReasonRetry: a transient failure; retry after Delay.
	ReasonRetry
	// ReasonPermanent: the cause is permanent (see IsPermanent); a queue
	// dead-letters the message.
	ReasonPermanent
	// ReasonExhausted: the failed attempt was the policy's last
	// (MaxAttempts); a queue dead-letters the message.
	ReasonExhausted
	// ReasonBudget: the retry budget refused this retry; do not send it
	// now. The message is not poison, the far side is struggling: a queue
	// keeps the message and asks again after Delay.
	ReasonBudget
	// ReasonCanceled: the cause is the error of the caller's own context
	// (it was cancelled or its deadline passed). Nothing to retry in this
	// call and nothing wrong with the message: a queue releases it as it
	// was.
	ReasonCanceled
)

// String returns the reason's name, "retry" or "permanent" for example.
func (r Reason) String() string {
	switch r {
	case ReasonSucceeded:
		return "succeeded"
	case ReasonRetry:
		return "retry"
	case ReasonPermanent:
		return "permanent"
	case ReasonExhausted:
		return "attempts exhausted"
	case ReasonBudget:
		return "budget exhausted"
	case ReasonCanceled:
		return "canceled"
	}
	return fmt.Sprintf("reason(%d)", int(r))
}

// Decision is what to do after one attempt.
type Decision struct {
	Reason Reason
	// Delay is how long to wait before the next attempt: with ReasonRetry,
	// the jittered backoff floored by the cause's Retry-After; with
	// ReasonBudget, the same, as the time to ask the budget again. Zero
	// otherwise.
	Delay time.Duration
	// At is now + Delay: the next visible time a queue persists.
	At time.Time
}

// Retry reports whether the next attempt should be made, after Delay.
func (d Decision) Retry() bool { return d.Reason == ReasonRetry }

// DeadLetter reports whether the message can never succeed as it is
// (permanent, or out of attempts), as opposed to merely waiting.
func (d Decision) DeadLetter() bool {
	return d.Reason == ReasonPermanent || d.Reason == ReasonExhausted
}

// Decide says what to do after attempt number attempt (1 for the first)
// failed with cause at time now. It never sleeps. Without a Budget it is a
// pure function of its arguments, the policy and the random source; with
// one, a decision to retry spends one retry from it.
//
// In order: a nil cause is ReasonSucceeded; a cause that is ctx's own error
// while ctx is done is ReasonCanceled (a DeadlineExceeded from a shorter
// per-attempt timeout, with ctx still live, is a transient failure like any
// other); a permanent cause is ReasonPermanent; a failed attempt that was
// number MaxAttempts or later is ReasonExhausted; then the delay is
// max(Backoff(attempt), min(RetryAfter(cause), MaxRetryAfter)), and the
// budget, if any, turns the retry into ReasonBudget when it refuses it.
// Every other error is transient: network errors, timeouts, anything not
// marked permanent. An attempt below 1 counts as 1, and a nil ctx as one
// that is never done.
//
// A retry is paid for when it is decided: make the retry Decide allowed
// without asking the budget again. A caller whose retries come back later
// as redeliveries, and who may send one that was refused (ReasonBudget),
// asks Budget.TryRetry before sending it.
func (r *Retrier) Decide(ctx context.Context, attempt int, cause error, now time.Time) Decision {
	attempt = max(attempt, 1)
	switch {
	case cause == nil:
		return Decision{Reason: ReasonSucceeded, At: now}
	case ctx != nil && ctx.Err() != nil && errors.Is(cause, ctx.Err()):
		return Decision{Reason: ReasonCanceled, At: now}
	case IsPermanent(cause):
		return Decision{Reason: ReasonPermanent, At: now}
	case r.p.MaxAttempts > 0 && attempt >= r.p.MaxAttempts:
		return Decision{Reason: ReasonExhausted, At: now}
	}
	delay := r.Backoff(attempt)
	if ra, ok := RetryAfter(cause); ok {
		delay = max(delay, min(ra, r.p.MaxRetryAfter))
	}
	d := Decision{Reason: ReasonRetry, Delay: delay, At: now.Add(delay)}
	if r.p.Budget != nil && !r.p.Budget.TryRetry() {
		d.Reason = ReasonBudget
	}
	return d
}
