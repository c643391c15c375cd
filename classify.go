package oncekv

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Action is what to do with a delivery after the store answered it: see
// Classify.
type Action uint8

// The actions, from the consumer's side of at-least-once delivery.
const (
	// Ack: no error. The delivery is applied, or was a duplicate; ack it.
	Ack Action = iota
	// RetryNow: nothing was applied, and delivering again at once can
	// succeed (a context that ended, a compare-and-set that lost a race).
	RetryNow
	// RetryLater: nothing was applied, and a retry can succeed after a
	// while: another worker holds the key (Advice.NotBefore says until
	// when), the disk is full, the file is locked, or the effect failed in
	// a way oncekv cannot judge (an upstream timeout). Redeliver with a
	// backoff.
	RetryLater
	// GiveUp: no retry can succeed: the request is bad (key too large, key
	// reused with another payload), its failure was recorded for good, or
	// a newer writer fenced it off. Dead-letter it; redelivering loops
	// forever.
	GiveUp
	// Reopen: this DB cannot serve the request, whatever it is: it was
	// closed, or opened read-only, or poisoned by an I/O error in a commit.
	// Nothing was applied. Close the DB and open it again (Open rebuilds
	// everything from the file); a consumer that is shutting down just
	// stops, and the broker redelivers.
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
	// NotBefore is, for RetryLater, when a retry can first succeed, where
	// the error says (ErrInProgress: the end of the holder's lease, by
	// DB.Now); zero where it does not, and a backoff decides.
	NotBefore time.Time
}

// giveUp lists the errors no retry can fix.
var giveUp = []error{
	ErrKeyReuse, ErrFailed, ErrFenced,
	ErrHandlerRequired, ErrKeyRequired, ErrKeyTooLarge, ErrValueTooLarge, ErrResponseTooLarge, ErrMarkOwnKey, ErrPublish, ErrInvalidMark, ErrBucketNameRequired,
	ErrInvalidOptions, ErrInvalidFingerprint, ErrInvalidLease, ErrInvalidFence, ErrResourceRequired,
	ErrTxNotWritable, ErrTxClosed, ErrIncompatibleValue, ErrUnversioned, ErrExhausted,
	ErrClaimDone, ErrUnknownClaim, ErrNotFound,
	ErrNotOncekv, ErrFormatVersion, ErrCorrupt,
}

// Classify says what a consumer should do with a delivery after err, the
// error of Apply, ApplyBatch (a request's Err), Claim and its methods, or
// any other DB method. Every error oncekv exports has its action:
//
//   - nil: Ack.
//   - ErrClosed, ErrReadOnly, ErrPoisoned: Reopen.
//   - an error marked permanent (see IsPermanent), ErrFailed, ErrKeyReuse,
//     ErrFenced, ErrResponseTooLarge, the bad input errors (ErrKeyTooLarge, ErrKeyRequired,
//     ErrHandlerRequired, ...), ErrCorrupt and the other file errors:
//     GiveUp. A record that does not decode will not decode next time
//     either; dead-letter the message and let an operator look.
//   - ErrInProgress: RetryLater, NotBefore the holder's lease end.
//   - ErrNoSpace, ErrLocked: RetryLater.
//   - ErrVersionConflict, context.Canceled, context.DeadlineExceeded:
//     RetryNow.
//   - anything else (an effect's own transient error): RetryLater.
//
// Classify calls only errors.Is and errors.As on err, so it runs the
// methods of the caller's own errors in the caller's goroutine.
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
