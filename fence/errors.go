package fence

import (
	"errors"
	"fmt"
)

// Errors of fenced and versioned writes. The root package re-exports them.
var (
	// ErrFenced: a write carried a fence that is not greater than the one
	// stored with the key, or a claim operation came from a worker that was
	// taken over. The writer is stale and must give up, not retry.
	ErrFenced = errors.New("oncekv: fenced off by a newer writer")
	// ErrVersionConflict: a compare-and-set presented a version that is no
	// longer the key's: someone wrote the key since it was read. Read it
	// again and retry.
	ErrVersionConflict = errors.New("oncekv: version conflict")
	// ErrUnversioned: a compare-and-set from version 0 met a key that exists
	// but has no version, because only plain Put ever wrote it. Plain Put
	// leaves no version on such a key, so version 0 cannot tell a racing Put
	// from none; see Keys.IfVersion.
	ErrUnversioned = errors.New("oncekv: key exists but has no version: it was written only with Put")
	// ErrInvalidFence: fence 0 was presented. Tokens start at 1, and 0 is
	// what a key without a fence reads as, so it can never be newer.
	ErrInvalidFence = errors.New("oncekv: fence must be positive")
	// ErrResourceRequired: a token was asked for an empty resource name.
	ErrResourceRequired = errors.New("oncekv: fence resource required")
	// ErrExhausted: a counter or a version reached 2^64-1 and cannot grow.
	ErrExhausted = errors.New("oncekv: fence counter exhausted")
)

// Error is ErrFenced with the fences compared: the write presented
// Presented, and the key already carries Stored, which is not smaller.
type Error struct {
	Stored    uint64
	Presented uint64
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("%v: stored fence %d, presented %d", ErrFenced, e.Stored, e.Presented)
}

// Unwrap makes errors.Is(err, ErrFenced) true.
func (e *Error) Unwrap() error { return ErrFenced }

// VersionError is ErrVersionConflict with the versions compared.
type VersionError struct {
	Stored    uint64
	Presented uint64
}

// Error implements error.
func (e *VersionError) Error() string {
	return fmt.Sprintf("%v: stored version %d, presented %d", ErrVersionConflict, e.Stored, e.Presented)
}

// Unwrap makes errors.Is(err, ErrVersionConflict) true.
func (e *VersionError) Unwrap() error { return ErrVersionConflict }
