// Package base is the vocabulary every oncekv package shares and no user
// should import: the error values (which the root package and package
// bucket re-export), the record error type, the mapping of bbolt's errors,
// the state one transaction's user buckets share, and the hook through
// which the root builds user buckets. It sits below bucket, layout and the
// root so that none of them imports another for these, as Pebble's
// internal/base does.
package base

import (
	"errors"
	"fmt"

	bolterrors "go.etcd.io/bbolt/errors"
)

// Errors returned for bad input to a request or a user bucket. Package
// bucket and the root package re-export them, so callers test them with errors.Is against
// oncekv.ErrKeyRequired and the like.
var (
	// ErrHandlerRequired: Request.Handler was empty.
	ErrHandlerRequired = errors.New("oncekv: handler required")
	// ErrInvalidFingerprint: Request.Fingerprint is longer than
	// MaxFingerprintSize.
	ErrInvalidFingerprint = errors.New("oncekv: invalid fingerprint")
	// ErrBucketNameRequired: a user bucket name was empty.
	ErrBucketNameRequired = errors.New("oncekv: bucket name required")
	// ErrKeyRequired: a key was empty.
	ErrKeyRequired = errors.New("oncekv: key required")
	// ErrKeyTooLarge: a key (or a mark's handler and key) exceeds bbolt's
	// 32768-byte key limit.
	ErrKeyTooLarge = errors.New("oncekv: key too large")
	// ErrValueTooLarge: a value exceeds bbolt's value limit.
	ErrValueTooLarge = errors.New("oncekv: value too large")
	// ErrTxNotWritable: a write was attempted in a read-only transaction.
	ErrTxNotWritable = errors.New("oncekv: transaction not writable")
	// ErrTxClosed: a transaction or a bucket obtained from it was used after
	// the function given to Update, View or Apply returned.
	ErrTxClosed = errors.New("oncekv: transaction closed")
	// ErrIncompatibleValue: a bucket operation met a nested bucket where it
	// expected a value, or the reverse.
	ErrIncompatibleValue = errors.New("oncekv: incompatible value")
)

// Errors about the file and its records.
var (
	// ErrCorrupt: a record or structure in the file failed validation.
	ErrCorrupt = errors.New("oncekv: corrupt database")
	// ErrFormatVersion: the file was written by a newer oncekv format.
	ErrFormatVersion = errors.New("oncekv: unsupported file format version")
)

// RecordError reports a system record that failed to decode, naming where it
// lives. It matches ErrCorrupt with errors.Is.
type RecordError struct {
	Bucket string // the bucket holding the record, for example "oncekv.meta"
	Key    string // the record's key, quoted when printed
	Err    error  // what was wrong
}

// Error implements error.
func (e *RecordError) Error() string {
	return fmt.Sprintf("oncekv: record %q in bucket %q does not decode: %v", Clip(e.Key), e.Bucket, e.Err)
}

// Unwrap lets errors.Is see both ErrCorrupt and the underlying cause.
func (e *RecordError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// MapBoltErr turns bbolt's bad-input errors into oncekv's, so users
// see one vocabulary whatever layer noticed the problem.
func MapBoltErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bolterrors.ErrBucketNameRequired):
		return ErrBucketNameRequired
	case errors.Is(err, bolterrors.ErrKeyRequired):
		return ErrKeyRequired
	case errors.Is(err, bolterrors.ErrKeyTooLarge):
		return ErrKeyTooLarge
	case errors.Is(err, bolterrors.ErrValueTooLarge):
		return ErrValueTooLarge
	case errors.Is(err, bolterrors.ErrTxNotWritable):
		return ErrTxNotWritable
	case errors.Is(err, bolterrors.ErrTxClosed):
		return ErrTxClosed
	case errors.Is(err, bolterrors.ErrIncompatibleValue):
		return ErrIncompatibleValue
	}
	return err
}

// Clip shortens a key for an error message: keys may be 32 KiB, and a message
// that long helps nobody.
func Clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
