package retry

import (
	"errors"
	"fmt"
	"time"
)

// Errors about bad input. Nothing is changed when one is returned.
var (
	// ErrInvalidPolicy: New was given a Policy with bad fields; the error
	// lists every one of them.
	ErrInvalidPolicy = errors.New("oncekv: invalid retry policy")
	// ErrInvalidBudget: NewBudget was given BudgetOptions with bad fields;
	// the error lists every one of them.
	ErrInvalidBudget = errors.New("oncekv: invalid retry budget options")
	// ErrRetryAfter: ParseRetryAfter met a value that is neither
	// delta-seconds nor an HTTP-date, or seconds too large for a
	// time.Duration.
	ErrRetryAfter = errors.New("oncekv: invalid Retry-After")
)

// Errors that Do wraps around the last cause when it gives up, so that
// errors.Is tells why while still reaching the cause.
var (
	// ErrExhausted: the policy's MaxAttempts attempts all failed.
	ErrExhausted = errors.New("oncekv: retry attempts exhausted")
	// ErrBudgetExhausted: the retry budget refused the retry, because
	// retries already make up their allowed share of recent traffic.
	ErrBudgetExhausted = errors.New("oncekv: retry budget exhausted")
)

// Permanent marks err as one that no retry can fix (a 400 or 422, a
// validation failure): Decide gives up at once with ReasonPermanent, and a
// queue dead-letters the message. errors.Is and errors.As still reach err.
// Permanent(nil) is nil.
//
// The mark is a method, not a type: an error is permanent when some error
// in its chain has a method Permanent() bool that returns true. The store's
// own oncekv.Permanent follows the same contract, so each side recognizes
// the other's mark without this package importing the store.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether some error in err's tree (followed through
// Unwrap() error and Unwrap() []error, as errors.Is does) has a method
// Permanent() bool that returns true. A join of a transient and a permanent
// error is permanent: retrying cannot fix its permanent part.
func IsPermanent(err error) bool {
	permanent := false
	walk(err, func(e error) {
		if p, ok := e.(interface{ Permanent() bool }); ok && !permanent {
			permanent = p.Permanent()
		}
	})
	return permanent
}

type permanentError struct{ err error }

func (p *permanentError) Error() string   { return p.err.Error() }
func (p *permanentError) Unwrap() error   { return p.err }
func (p *permanentError) Permanent() bool { return true }

// After attaches a Retry-After to err: the next attempt must not come
// sooner than d after this failure (Decide takes the larger of d and the
// jittered backoff, d capped by Policy.MaxRetryAfter). errors.Is and
// errors.As still reach err. After(d, nil) is nil; a negative d counts as
// zero.
//
// Like Permanent, the mark is a method: an error carries a Retry-After when
// some error in its chain has a method RetryAfter() time.Duration, so other
// packages can define their own.
func After(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &afterError{d: max(d, 0), err: err}
}

// RetryAfter returns the Retry-After that err carries (see After), and
// whether it carries one. When several errors in its tree carry one (an
// errors.Join of two failures), the longest wins: every one of them asked
// for at least that much quiet.
func RetryAfter(err error) (time.Duration, bool) {
	var longest time.Duration
	found := false
	walk(err, func(e error) {
		if a, ok := e.(interface{ RetryAfter() time.Duration }); ok {
			longest = max(longest, a.RetryAfter())
			found = true
		}
	})
	return longest, found
}

type afterError struct {
	d   time.Duration
	err error
}

func (a *afterError) Error() string             { return a.err.Error() }
func (a *afterError) Unwrap() error             { return a.err }
func (a *afterError) RetryAfter() time.Duration { return a.d }

// walk visits every error in err's tree, depth first, in the order
// errors.Is uses.
func walk(err error, visit func(error)) {
	for err != nil {
		visit(err)
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e, visit)
			}
			return
		default:
			return
		}
	}
}

// GiveUpError is what Do returns when it stops retrying: why, after how
// many attempts, and the last attempt's error. errors.Is reaches that
// error, and also ErrExhausted, ErrBudgetExhausted or the context's error
// according to Reason; IsPermanent holds when the cause was permanent.
type GiveUpError struct {
	Reason   Reason // never ReasonSucceeded or ReasonRetry
	Attempts int    // attempts made, the first included
	Err      error  // the last attempt's error
	ctxErr   error  // the context's error, for ReasonCanceled
}

// Error implements error.
func (e *GiveUpError) Error() string {
	return fmt.Sprintf("oncekv: gave up after %d attempts (%s): %v", e.Attempts, e.Reason, e.Err)
}

// Unwrap exposes the last cause and the sentinel of the reason.
func (e *GiveUpError) Unwrap() []error {
	errs := []error{e.Err}
	switch e.Reason {
	case ReasonExhausted:
		errs = append(errs, ErrExhausted)
	case ReasonBudget:
		errs = append(errs, ErrBudgetExhausted)
	case ReasonCanceled:
		if e.ctxErr != nil {
			errs = append(errs, e.ctxErr)
		}
	}
	return errs
}
