package bucket

import (
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/fencestore"
)

// Errors returned for bad input to a user bucket. The root package
// re-exports them too, so callers may test them with errors.Is against
// either bucket.ErrKeyRequired or oncekv.ErrKeyRequired: they are the same
// values.
var (
	// ErrBucketNameRequired: a user bucket name was empty.
	ErrBucketNameRequired = base.ErrBucketNameRequired
	// ErrKeyRequired: a key was empty.
	ErrKeyRequired = base.ErrKeyRequired
	// ErrKeyTooLarge: a key (or a bucket name) exceeds MaxKeySize
	// (MaxBucketNameSize).
	ErrKeyTooLarge = base.ErrKeyTooLarge
	// ErrValueTooLarge: a value exceeds MaxValueSize.
	ErrValueTooLarge = base.ErrValueTooLarge
	// ErrTxNotWritable: a write was attempted in a read-only transaction.
	ErrTxNotWritable = base.ErrTxNotWritable
	// ErrTxClosed: a bucket or cursor was used after the function given to
	// Update, View or Apply returned.
	ErrTxClosed = base.ErrTxClosed
	// ErrIncompatibleValue: a bucket operation met a nested bucket where it
	// expected a value, or the reverse.
	ErrIncompatibleValue = base.ErrIncompatibleValue
	// ErrCorrupt: a record the operation needed (a key's fence record, the
	// system bucket of fences) failed validation. The error is then an
	// *oncekv.RecordError naming the bucket and key where one is known.
	ErrCorrupt = base.ErrCorrupt
)

// Size limits, bbolt's own.
const (
	// MaxKeySize is the largest key a bucket stores.
	MaxKeySize = bolt.MaxKeySize
	// MaxValueSize is the largest value a bucket stores: bbolt's, less the
	// header that carries a key's fence and version.
	MaxValueSize = bolt.MaxValueSize - fencestore.EntryHeaderSize
	// MaxBucketNameSize is the longest bucket name: MaxKeySize less the
	// prefix that keeps user buckets apart from oncekv's own.
	MaxBucketNameSize = MaxKeySize - 2
)
