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

// Errors of Apply, ApplyBatch and Claim about a request, wrapped in a
// *RequestError naming the handler and key.
var (
	// ErrKeyReuse: the key was first used with another payload (or
	// Request.Fingerprint): an idempotency key reused for another operation.
	ErrKeyReuse = errors.New("oncekv: idempotency key reused with a different payload")
	// ErrInProgress: a live claim holds the key (HTTP 409); retry later. It
	// comes as an *InProgressError saying when the lease runs out.
	ErrInProgress = errors.New("oncekv: key is being processed right now")
	// ErrFenced: a write or claim operation presented a fence or token not
	// newer than the stored one: a stale writer, which must give up. It
	// comes as a *FenceError with both numbers where both are known.
	ErrFenced = fence.ErrFenced
	// ErrFailed: the key's effect failed permanently (see Permanent) and
	// every duplicate gets the recorded failure back.
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
	// ErrKeyTooLarge: a key, or a request's handler and key together, do
	// not fit in bbolt's key limit.
	ErrKeyTooLarge = bucket.ErrKeyTooLarge
	// ErrValueTooLarge: a value exceeds bbolt's value limit.
	ErrValueTooLarge = bucket.ErrValueTooLarge
	// ErrResponseTooLarge: a response, or a permanent error's message, is
	// over MaxResponseSize; that request only is rolled back.
	ErrResponseTooLarge = errors.New("oncekv: response too large for a mark")
	// ErrBucketNameRequired: a bucket name was empty.
	ErrBucketNameRequired = bucket.ErrBucketNameRequired
	// ErrInvalidOptions: Options failed validation; the error lists every
	// field that was wrong.
	ErrInvalidOptions = errors.New("oncekv: invalid options")
	// ErrInvalidMark: LoadMarks was given a state that is no MarkState.
	ErrInvalidMark = errors.New("oncekv: invalid mark")
	// ErrMarkOwnKey: Tx.Mark or Tx.LookupMark, from Apply's or
	// Claim.Complete's effect, of the key that call is writing itself.
	ErrMarkOwnKey = errors.New("oncekv: mark: the key is the one its Apply is applying")
	// ErrPublish: Publish was given an empty name, a nil DB, or a name held
	// by another variable or by a DB still open.
	ErrPublish = errors.New("oncekv: cannot publish stats to expvar")
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
	// ErrLocked: another process (or DB) holds the file; Open gave up after
	// Options.OpenTimeout.
	ErrLocked = errors.New("oncekv: database file is locked by another user")
	// ErrReadOnly: a write to a DB opened with Options.ReadOnly.
	ErrReadOnly = errors.New("oncekv: database opened read-only")
	// ErrNotOncekv: the file is not an oncekv database.
	ErrNotOncekv = layout.ErrNotOncekv
	// ErrCorrupt: the file or one of its records failed validation.
	ErrCorrupt = bucket.ErrCorrupt
	// ErrFormatVersion: the file was written by a newer format.
	ErrFormatVersion = base.ErrFormatVersion
	// ErrInvalidWindow is ErrInvalidOptions under its former name.
	//
	// Deprecated: use ErrInvalidOptions.
	ErrInvalidWindow = ErrInvalidOptions
)

// Errors of a commit that failed in the file system. The file holds the
// request's effect and mark both or neither.
var (
	// ErrPoisoned: a commit failed with an I/O error, so what is durable is
	// in doubt; every later write returns it, wrapping the cause, until the
	// DB is reopened. Reads keep working (docs/design/poisoning-and-enospc.md).
	ErrPoisoned = errors.New("oncekv: a commit failed with an I/O error; writes are refused until the database is reopened")
	// ErrNoSpace: the disk filled before the commit became visible (it wraps
	// syscall.ENOSPC): nothing changed, and writes resume once space is
	// freed. ENOSPC later in a commit poisons the DB instead.
	ErrNoSpace = errors.New("oncekv: no space left on device")
)

// RecordError is a system record (a mark, a fence, a metadata record)
// that failed to decode:
//
//	Bucket string // the system bucket holding the record, e.g. "oncekv.meta"
//	Key    string // the record's key in that bucket
//	Err    error  // what was wrong
//
// errors.Is matches it with both ErrCorrupt and Err.
type RecordError = base.RecordError

// RequestError wraps an error about one request with its handler and key.
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

// trimPrefix drops the "oncekv: " of a wrapped error's message.
func trimPrefix(err error) string {
	s := err.Error()
	const p = "oncekv: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// Permanent marks an effect's error as one no retry can fix (a 400 from an
// upstream): Apply rolls back the effect's writes, records the key FAILED
// and answers every duplicate with it. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err or an error it wraps has a method
// Permanent() bool returning true: the contract Permanent's errors and
// package retry's share.
func IsPermanent(err error) bool {
	for _, e := range chain(err) {
		if p, ok := e.(interface{ Permanent() bool }); ok && p.Permanent() {
			return true
		}
	}
	return false
}

// chain lists err and every error it wraps, depth first, as errors.Is does.
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

// InProgressError is ErrInProgress with the end of the holding claim's
// lease, so a consumer can come back then instead of polling.
type InProgressError struct {
	until time.Time
}

// Error implements error.
func (e *InProgressError) Error() string {
	return fmt.Sprintf("%v until %v", ErrInProgress, e.until.UTC().Format(time.RFC3339Nano))
}

// Unwrap makes errors.Is(err, ErrInProgress) true.
func (e *InProgressError) Unwrap() error { return ErrInProgress }

// LeaseUntil returns when the holding claim's lease runs out, by DB.Now's
// clock.
func (e *InProgressError) LeaseUntil() time.Time { return e.until }

// RetryAfter returns how long after now (pass DB.Now()) the lease runs out,
// zero if it has.
func (e *InProgressError) RetryAfter(now time.Time) time.Duration {
	return max(e.until.Sub(now), 0)
}

// FailedError is a key's recorded permanent failure, matching ErrFailed;
// the call that failed gets one wrapping the original error too.
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
// Bucket.PutIfVersion, DB.NextFence), package fence's. Nothing is changed.
var (
	// ErrVersionConflict: PutIfVersion's version is no longer the key's;
	// read it again and retry. It comes as a *VersionError.
	ErrVersionConflict = fence.ErrVersionConflict
	// ErrUnversioned: PutIfVersion from version 0 met a key only ever
	// written with plain Put; retrying does not help.
	ErrUnversioned = fence.ErrUnversioned
	// ErrInvalidFence: PutFenced was given fence 0.
	ErrInvalidFence = fence.ErrInvalidFence
	// ErrResourceRequired: NextFence was given an empty resource name.
	ErrResourceRequired = fence.ErrResourceRequired
	// ErrExhausted: a fence or token counter, or a key's version, reached
	// 2^64-1; the call is refused rather than wrap around.
	ErrExhausted = fence.ErrExhausted
)

// FenceError is package fence's [fence.Error]: a write refused with
// ErrFenced, or a claim taken over, with both numbers:
//
//	type FenceError struct {
//		Stored    uint64 // the fence the key (or the claim's mark) carries
//		Presented uint64 // the fence the refused write presented
//	}
type FenceError = fence.Error

// VersionError is package fence's [fence.VersionError]: a
// [Bucket.PutIfVersion] refused with ErrVersionConflict:
//
//	type VersionError struct {
//		Stored    uint64 // the key's version now
//		Presented uint64 // the version the write expected
//	}
type VersionError = fence.VersionError

// Errors of claims (DB.Claim and the methods of Claim), wrapped in a
// *RequestError.
var (
	// ErrInvalidLease: a lease that is not positive.
	ErrInvalidLease = errors.New("oncekv: lease must be positive")
	// ErrClaimDone: Extend, Complete or Fail on a claim that no longer holds
	// its key (Done, or completed, failed or released already).
	ErrClaimDone = errors.New("oncekv: claim is done: it no longer holds its key")
	// ErrUnknownClaim: a method of a nil or zero Claim.
	ErrUnknownClaim = errors.New("oncekv: unknown claim: use the one DB.Claim returned")
	// ErrNotFound: DB.Mark or DB.ReleaseClaim of a key without a mark in
	// the live windows.
	ErrNotFound = errors.New("oncekv: no mark for the key")
)

// Errors of parked keys (DB.ClaimWith's probe, DB.ResolveParked), wrapped
// in a *RequestError. A parked key runs nothing until an operator resolves
// it (docs/design/probe.md).
var (
	// ErrParked: the key is parked: a takeover's probe could not tell
	// whether an earlier attempt applied its effect, so neither a retry
	// (a second effect) nor dropping it (a lost one) is safe. Apply, Claim
	// and every duplicate get it, as a *ParkedError, until an operator
	// calls DB.ResolveParked (`oncekv resolve`). Give up on the delivery
	// and page a human.
	ErrParked = errors.New("oncekv: key parked: an earlier attempt's outcome is unknown; an operator must resolve it")
	// ErrParkFull: a probe answered OutcomeUnknown while Options.MaxParked
	// keys were parked: this key could not be parked. It stays claimable,
	// its earlier attempt still in doubt: the next takeover probes again.
	ErrParkFull = errors.New("oncekv: cannot park the key: Options.MaxParked keys are parked already")
	// ErrNotParked: DB.ResolveParked of a key that is not parked.
	ErrNotParked = errors.New("oncekv: the key is not parked")
)

// ParkedError is ErrParked with the attempt in doubt, for the page a human
// gets: its token (which the external system may have seen), when it took
// the key, and how many takeovers the key had.
type ParkedError struct {
	Attempt Attempt
}

// Error implements error.
func (e *ParkedError) Error() string {
	return fmt.Sprintf("%v (the attempt with token %d, started %s, after %d takeovers)", ErrParked,
		e.Attempt.Token, e.Attempt.Started.UTC().Format(time.RFC3339Nano), e.Attempt.Takeovers)
}

// Unwrap makes errors.Is(err, ErrParked) true.
func (e *ParkedError) Unwrap() error { return ErrParked }

// trimmed wraps err so that its message loses a leading "oncekv: ";
// errors.Is still sees err.
func trimmed(err error) error { return &trimmedError{err} }

type trimmedError struct{ err error }

func (e *trimmedError) Error() string { return trimPrefix(e.err) }

func (e *trimmedError) Unwrap() error { return e.err }

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
