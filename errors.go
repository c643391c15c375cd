package oncekv

import (
	"errors"
	"fmt"
	"time"

	"github.com/oncekv/oncekv/bucket"
	"github.com/oncekv/oncekv/fence"
	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/layout"
)

// Errors returned by Apply, ApplyBatch and Claim for a request. They come
// wrapped in a *RequestError that names the handler and key; test them with
// errors.Is.
var (
	// ErrKeyReuse: the key was first used with another payload (other
	// bytes, or another Request.Fingerprint when the requests carry one).
	// The caller reused an idempotency key for a different operation
	// (Stripe answers this with 400 idempotency_error). Nothing changed.
	ErrKeyReuse = errors.New("oncekv: idempotency key reused with a different payload")
	// ErrInProgress: a live claim holds the key right now (HTTP 409). Retry
	// later; oncekv never waits under a lock. It comes as an
	// *InProgressError, which says when the claim's lease runs out.
	ErrInProgress = errors.New("oncekv: key is being processed right now")
	// ErrFenced: a write or a claim operation carried a fence or token that
	// is not newer than the stored one: the writer is stale (a zombie after
	// a pause) and must give up, not retry. A rejected PutFenced, or a
	// claim taken over by a newer Claim or by Apply, gives a *FenceError
	// with both. A claim whose mark is gone altogether (forgotten, or its
	// window expired) gets ErrFenced with that reason.
	ErrFenced = fence.ErrFenced
	// ErrFailed: the key's effect failed permanently (see Permanent) and the
	// failure was recorded; every duplicate gets it back.
	ErrFailed = errors.New("oncekv: operation failed permanently")
)

// Errors about bad input. Nothing is changed when one is returned.
var (
	// ErrHandlerRequired: Request.Handler was empty.
	ErrHandlerRequired = base.ErrHandlerRequired
	// ErrInvalidFingerprint: Request.Fingerprint is longer than
	// MaxFingerprintSize.
	ErrInvalidFingerprint = base.ErrInvalidFingerprint
	// ErrKeyRequired: a key was empty.
	ErrKeyRequired = bucket.ErrKeyRequired
	// ErrKeyTooLarge: a key, or a request's handler and key together, do not
	// fit in bbolt's 32768-byte key limit.
	ErrKeyTooLarge = bucket.ErrKeyTooLarge
	// ErrValueTooLarge: a value exceeds bbolt's value limit.
	ErrValueTooLarge = bucket.ErrValueTooLarge
	// ErrResponseTooLarge: an effect's response, or a permanent error's
	// message, is larger than a mark can hold (MaxResponseSize). The
	// message names both sizes. The request's effect is rolled back and
	// nothing is recorded for it; the other requests of the same commit
	// are not affected.
	ErrResponseTooLarge = errors.New("oncekv: response too large for a mark")
	// ErrBucketNameRequired: a bucket name was empty.
	ErrBucketNameRequired = bucket.ErrBucketNameRequired
	// ErrInvalidOptions: Options failed validation; the error lists every
	// field that was wrong.
	ErrInvalidOptions = errors.New("oncekv: invalid options")
)

// Errors about the transaction in use.
var (
	// ErrTxNotWritable: a write in a View transaction.
	ErrTxNotWritable = bucket.ErrTxNotWritable
	// ErrTxClosed: a Tx, Bucket or Cursor was used after its function
	// returned.
	ErrTxClosed = bucket.ErrTxClosed
	// ErrIncompatibleValue: a bucket operation met a value of the wrong kind.
	ErrIncompatibleValue = bucket.ErrIncompatibleValue
)

// Errors about the database and its file.
var (
	// ErrClosed: the DB was used after Close.
	ErrClosed = errors.New("oncekv: database closed")
	// ErrLocked: another process (or another DB in this one) holds the file;
	// Open gave up after Options.OpenTimeout (the message says how long it
	// really waited: bbolt may give up a little before the timeout).
	ErrLocked = errors.New("oncekv: database file is locked by another user")
	// ErrReadOnly: a write to a DB opened with Options.ReadOnly. Nothing
	// was changed.
	ErrReadOnly = errors.New("oncekv: database opened read-only")
	// ErrNotOncekv: the file is not an oncekv database.
	ErrNotOncekv = layout.ErrNotOncekv
	// ErrCorrupt: the file or one of its records failed validation.
	ErrCorrupt = bucket.ErrCorrupt
	// ErrFormatVersion: the file was written by a newer format.
	ErrFormatVersion = base.ErrFormatVersion
	// ErrInvalidWindow is ErrInvalidOptions, under the name it had when
	// the window fields (Retention, WindowSpan) were reported apart. One
	// condition, one error: the name stays so code that tests for it
	// keeps compiling and keeps matching.
	//
	// Deprecated: use ErrInvalidOptions.
	ErrInvalidWindow = ErrInvalidOptions
)

// Errors of a commit that failed in the file system. The request that met
// one was not acknowledged; whether it is applied is decided by the file,
// both its effect and its mark or neither.
var (
	// ErrPoisoned: a commit failed with an I/O error (EIO, a failed fsync,
	// or anything else that may have left part of the transaction in the
	// file), so the store cannot tell what is durable. It refuses every
	// later write with this error, wrapping the first cause, until the DB
	// is closed and reopened; reads keep working. Reopen the DB: Open
	// rebuilds everything from what the file really holds. Retrying an
	// fsync that failed proves nothing (the kernel may have dropped the
	// pages), which is why oncekv does not retry.
	ErrPoisoned = errors.New("oncekv: a commit failed with an I/O error; writes are refused until the database is reopened")
	// ErrNoSpace: the file system is full (it wraps syscall.ENOSPC). It is
	// returned when writing a transaction's pages ran out of space before
	// any of it became visible: nothing changed, the DB stays usable, and
	// writes succeed again once space is freed. ENOSPC met anywhere else
	// in a commit (from fsync, say) poisons the DB like any other I/O
	// error and comes as ErrPoisoned, which wraps syscall.ENOSPC too.
	ErrNoSpace = errors.New("oncekv: no space left on device")
)

// RecordError is a system record (a mark, a fence, a metadata record) that
// failed to decode. Its fields are
//
//	Bucket string // the system bucket holding the record, e.g. "oncekv.meta"
//	Key    string // the record's key in that bucket
//	Err    error  // what was wrong
//
// errors.Is matches it with both ErrCorrupt and Err. Get one with
// errors.As(err, new(*oncekv.RecordError)).
type RecordError = base.RecordError

// RequestError wraps an error about one request with its handler and key,
// so the message says which operation failed. errors.Is sees through it.
type RequestError struct {
	Op      string // "apply", "claim", …
	Handler string
	Key     string
	Err     error
}

// Error implements error.
func (e *RequestError) Error() string {
	return fmt.Sprintf("oncekv: %s handler %q key %q: %s", e.Op, base.Clip(e.Handler), base.Clip(e.Key), trimPrefix(e.Err))
}

// Unwrap returns the cause.
func (e *RequestError) Unwrap() error { return e.Err }

func requestError(op string, req *Request, err error) error {
	if err == nil {
		return nil
	}
	var re *RequestError
	if errors.As(err, &re) {
		return err
	}
	return &RequestError{Op: op, Handler: req.Handler, Key: req.Key, Err: err}
}

// trimPrefix drops the "oncekv: " of a wrapped error, so a message reads
// "oncekv: apply … : key reused" rather than repeating the package name.
func trimPrefix(err error) string {
	s := err.Error()
	const p = "oncekv: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// Permanent marks an effect's error as permanent: Apply records the key as
// FAILED with it, rolls back the effect's writes, and answers every
// duplicate with the same failure instead of running the effect again. Use
// it for errors a retry cannot fix (a 400 or 422 from an upstream, a
// validation failure). Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or any error in its chain, has a method
// Permanent() bool that returns true. Permanent's errors have one, and so
// may any other package's: this is the contract package retry (which cannot
// import oncekv) shares, so an error either side marks permanent is
// recognised by the other.
func IsPermanent(err error) bool {
	for _, e := range chain(err) {
		if p, ok := e.(interface{ Permanent() bool }); ok && p.Permanent() {
			return true
		}
	}
	return false
}

// chain lists err and every error it wraps, depth first, as errors.Is
// walks them.
func chain(err error) []error {
	var all []error
	var walk func(error)
	walk = func(e error) {
		for e != nil {
			all = append(all, e)
			switch u := e.(type) {
			case interface{ Unwrap() error }:
				e = u.Unwrap()
			case interface{ Unwrap() []error }:
				for _, inner := range u.Unwrap() {
					walk(inner)
				}
				return
			default:
				return
			}
		}
	}
	walk(err)
	return all
}

type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

// Permanent reports true: see IsPermanent.
func (p *permanentError) Permanent() bool { return true }

// InProgressError is ErrInProgress with the end of the lease of the claim
// that holds the key, so a consumer can come back then instead of polling
// (a NAK with a delay, a Retry-After header). errors.Is(err, ErrInProgress)
// is true of it.
type InProgressError struct {
	until time.Time
}

// Error implements error.
func (e *InProgressError) Error() string {
	return fmt.Sprintf("%v until %v", ErrInProgress, e.until.UTC().Format(time.RFC3339Nano))
}

// Unwrap makes errors.Is(err, ErrInProgress) true.
func (e *InProgressError) Unwrap() error { return ErrInProgress }

// LeaseUntil returns when the holding claim's lease runs out, by the
// store's clock (DB.Now). Its holder may still Extend it, Complete or Fail
// before then; a retry at that time finds the key done, or takes it over.
func (e *InProgressError) LeaseUntil() time.Time { return e.until }

// RetryAfter returns how long after now the lease runs out: the delay
// before a retry can take the key over, zero if it has run out already.
// Pass DB.Now() as now, so the delay is by the clock that decides.
func (e *InProgressError) RetryAfter(now time.Time) time.Duration {
	return max(e.until.Sub(now), 0)
}

// FailedError is the recorded permanent failure of a key. The call that
// failed gets one wrapping the original error (so errors.Is finds it);
// duplicates get one rebuilt from the stored message. Both match ErrFailed.
type FailedError struct {
	Message string // the original error's message, as stored
	cause   error  // the original error; nil when replayed from disk
}

// Error implements error.
func (e *FailedError) Error() string { return "oncekv: failed permanently: " + e.Message }

// Unwrap exposes ErrFailed and, on the call that failed, the original error.
func (e *FailedError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrFailed}
	}
	return []error{ErrFailed, e.cause}
}

// Errors of fenced and versioned writes (Bucket.PutFenced,
// Bucket.PutIfVersion, DB.NextFence). Nothing is changed when one is
// returned. ErrFenced is with the request errors above.
var (
	// ErrVersionConflict: PutIfVersion presented a version that is no
	// longer the key's, because the key was written since it was read. Read
	// it again and retry; a *VersionError holds both versions.
	ErrVersionConflict = fence.ErrVersionConflict
	// ErrUnversioned: PutIfVersion from version 0 met a key that exists but
	// was only ever written with plain Put, so a racing Put could not be
	// detected. Retrying does not help; see Bucket.PutIfVersion.
	ErrUnversioned = fence.ErrUnversioned
	// ErrInvalidFence: PutFenced was given fence 0, which is never newer
	// than anything.
	ErrInvalidFence = fence.ErrInvalidFence
	// ErrResourceRequired: NextFence was given an empty resource name.
	ErrResourceRequired = fence.ErrResourceRequired
	// ErrExhausted: a fence counter, the claim token counter or a key's
	// version reached 2^64-1 and cannot grow; NextFence, Claim,
	// PutFenced or PutIfVersion refuse rather than wrap around to a value
	// issued before.
	ErrExhausted = fence.ErrExhausted
)

// FenceError is a fenced write refused with ErrFenced: the key carries
// Stored, and the write presented Presented, which is not greater. A claim
// taken over by a newer one gets one too, with the tokens. It is package
// fence's [fence.Error]:
//
//	type FenceError struct {
//		Stored    uint64 // the fence the key (or the claim's mark) carries
//		Presented uint64 // the fence the refused write presented
//	}
//
// errors.Is(err, ErrFenced) matches it; errors.As(err, new(*FenceError))
// gets the numbers. Give up on the write: a newer writer owns the key.
type FenceError = fence.Error

// VersionError is a compare-and-set ([Bucket.PutIfVersion]) refused with
// ErrVersionConflict. It is package fence's [fence.VersionError]:
//
//	type VersionError struct {
//		Stored    uint64 // the key's version now
//		Presented uint64 // the version the write expected
//	}
//
// errors.Is(err, ErrVersionConflict) matches it. Read the key again (its
// value and Version) and retry.
type VersionError = fence.VersionError

// Errors of claims (DB.Claim and the methods of Claim). Those about one
// request come wrapped in a *RequestError, like Apply's.
var (
	// ErrInvalidLease: a claim or an extension asked for a lease that is
	// not positive.
	ErrInvalidLease = errors.New("oncekv: lease must be positive")
	// ErrClaimDone: Extend, Complete or Fail on a claim that holds nothing
	// any more: its key was done when it was claimed (Done is true), or
	// this claim has already completed, failed or released it.
	ErrClaimDone = errors.New("oncekv: claim is done: it no longer holds its key")
	// ErrUnknownClaim: a method was called on a nil or zero Claim rather
	// than one that DB.Claim returned.
	ErrUnknownClaim = errors.New("oncekv: unknown claim: use the one DB.Claim returned")
	// ErrNotFound: DB.Mark or DB.ReleaseClaim was asked about a key that
	// has no mark in the live windows: never seen, forgotten, or expired.
	ErrNotFound = errors.New("oncekv: no mark for the key")
)

// NewInProgressError returns the *InProgressError of a key that a claim
// holds until until, by the clock of the store that refused the request.
// It is for a store outside this package (the PostgreSQL store, module
// oncekv/postgres) that refuses a request as DB.Claim does, so that
// Classify and errors.As work alike on either store.
func NewInProgressError(until time.Time) *InProgressError {
	return &InProgressError{until: until}
}

// NewFailedError returns the *FailedError of a permanent failure recorded
// with message. cause is the original error on the call that failed, which
// errors.Is then finds too; nil for a failure replayed from a stored mark.
// It is for a store outside this package (the PostgreSQL store), so that a
// failure recorded there is the same error as here.
func NewFailedError(message string, cause error) *FailedError {
	return &FailedError{Message: message, cause: cause}
}
