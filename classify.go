package oncekv

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Action is what to do with a delivery after the store answered (Classify).
type Action uint8

// The actions, from the consumer's side of at-least-once delivery.
const (
	// Ack: no error. The delivery is applied, or was a duplicate; ack it.
	Ack Action = iota
	// RetryNow: nothing was applied, and delivering again at once can
	// succeed (a context that ended, a compare-and-set that lost a race).
	RetryNow
	// RetryLater: nothing was applied, and a retry can succeed after a
	// while (a live claim, until Advice.NotBefore; a full disk; a locked
	// file; an effect's own error). Redeliver with a backoff.
	RetryLater
	// GiveUp: no retry can succeed (bad request, key reused, failure
	// recorded, fenced off). Dead-letter it.
	GiveUp
	// Reopen: this DB cannot serve any request (closed, read-only,
	// poisoned); nothing was applied. Close it and open it again, or stop.
	Reopen
)

// String returns the action's name.
func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case RetryNow:
		return "retry now"
	case RetryLater:
		return "retry later"
	case GiveUp:
		return "give up"
	case Reopen:
		return "reopen"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Advice is Classify's answer.
type Advice struct {
	Action Action
	// NotBefore is, for RetryLater, when a retry can first succeed where the
	// error says (ErrInProgress's lease end, by DB.Now); else zero.
	NotBefore time.Time
}

// giveUp lists the errors no retry can fix.
var giveUp = []error{
	ErrKeyReuse, ErrFailed, ErrFenced,
	ErrHandlerRequired, ErrKeyRequired, ErrKeyTooLarge, ErrValueTooLarge, ErrResponseTooLarge, ErrMarkOwnKey, ErrPublish, ErrInvalidMark, ErrBucketNameRequired,
	ErrInvalidOptions, ErrInvalidFingerprint, ErrInvalidLease, ErrInvalidFence, ErrResourceRequired,
	ErrTxNotWritable, ErrTxClosed, ErrIncompatibleValue, ErrUnversioned, ErrExhausted,
	ErrClaimDone, ErrUnknownClaim, ErrNotFound, ErrParked, ErrParkFull, ErrNotParked,
	ErrNotOncekv, ErrFormatVersion, ErrCorrupt,
}

// Classify says what a consumer should do with a delivery after err, an
// error of any DB or Claim method (or a BatchResult's Err):
//
//   - nil: Ack.
//   - ErrClosed, ErrReadOnly, ErrPoisoned: Reopen.
//   - a permanent error (IsPermanent), ErrFailed, ErrKeyReuse, ErrFenced,
//     ErrParked and ErrParkFull (page a human), the bad input errors,
//     ErrCorrupt and the other file errors: GiveUp.
//   - ErrInProgress: RetryLater, NotBefore the lease's end.
//   - ErrNoSpace, ErrLocked: RetryLater.
//   - ErrVersionConflict, context.Canceled, context.DeadlineExceeded:
//     RetryNow.
//   - anything else (an effect's transient error): RetryLater.
//
// It calls only errors.Is and errors.As on err, in the caller's goroutine.
func Classify(err error) Advice {
	if err == nil {
		return Advice{Action: Ack}
	}
	var ipe *InProgressError
	switch {
	case errors.Is(err, ErrPoisoned), errors.Is(err, ErrClosed), errors.Is(err, ErrReadOnly):
		return Advice{Action: Reopen}
	case IsPermanent(err):
		return Advice{Action: GiveUp}
	case errors.As(err, &ipe):
		return Advice{Action: RetryLater, NotBefore: ipe.LeaseUntil()}
	case errors.Is(err, ErrVersionConflict), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Advice{Action: RetryNow}
	}
	for _, e := range giveUp {
		if errors.Is(err, e) {
			return Advice{Action: GiveUp}
		}
	}
	return Advice{Action: RetryLater} // ErrInProgress without a lease, ErrNoSpace, ErrLocked, the unknown
}
