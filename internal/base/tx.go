package base

import (
	"errors"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/fencestore"
)

// UserPrefix puts user buckets apart from system buckets at the root of the
// file: user bucket "x" is root bucket "u/x", and no system bucket starts
// with "u/", so no user name can reach one.
var UserPrefix = []byte("u/")

// UserName returns the root bucket name of the user bucket name.
func UserName(name []byte) []byte {
	return append(append(make([]byte, 0, len(UserPrefix)+len(name)), UserPrefix...), name...)
}

// Life is the state that the buckets and cursors of one transaction share.
// Above all it tells them whether that transaction is still open. bbolt
// unmaps its pages when the database closes, so touching a bucket after its
// transaction ended could read freed memory; every user-facing call checks
// Life first and fails cleanly instead.
type Life struct {
	ended atomic.Bool
	// rejected counts the fenced and versioned writes refused in the
	// transaction, for the store's statistics.
	rejected atomic.Uint64
	// keys holds the fence records of each user bucket the transaction
	// touched, by name. Every handle on a bucket shares them, so that a
	// look-up of its records that found none can be kept: only a write
	// through the same records can create them. bbolt transactions are used
	// by one goroutine at a time, and so is this map; it holds at most one
	// entry per user bucket of the file.
	keys map[string]*fencestore.Keys
}

// End marks the transaction finished.
func (l *Life) End() { l.ended.Store(true) }

// Ended reports whether the transaction has finished.
func (l *Life) Ended() bool { return l.ended.Load() }

// Reject counts one refused fenced or versioned write.
func (l *Life) Reject() { l.rejected.Add(1) }

// Rejected returns how many fenced or versioned writes the transaction
// refused (ErrFenced, ErrVersionConflict, ErrUnversioned).
func (l *Life) Rejected() uint64 { return l.rejected.Load() }

// Keys returns the fence records of the user bucket name, opening them in
// root (the system bucket of fences) on first use in the transaction.
func (l *Life) Keys(root *bolt.Bucket, name []byte) *fencestore.Keys {
	if k := l.keys[string(name)]; k != nil {
		return k
	}
	if l.keys == nil {
		l.keys = make(map[string]*fencestore.Keys)
	}
	k := fencestore.OpenKeys(root, name)
	l.keys[string(name)] = k
	return k
}

// Buckets is how the root package builds and drops user buckets without
// package bucket exporting a constructor that takes a raw *bolt.Tx: bucket
// fills it in its init, and the root, which imports bucket, calls it. Open
// and Create return a *bucket.Bucket (a nil one when absent), typed any
// because this package sits below bucket.
var Buckets struct {
	Open   func(tx *bolt.Tx, name []byte, life *Life) any
	Create func(tx *bolt.Tx, name []byte, life *Life) (any, error)
	Delete func(tx *bolt.Tx, name []byte) (existed bool, err error)
	// Check decodes every fence header of the user bucket name, calling
	// report with a *RecordError for each one that does not decode.
	Check func(tx *bolt.Tx, name []byte, report func(error) error) error
}

// FenceError turns what package fencestore returns into oncekv's vocabulary:
// a record that does not decode becomes a *RecordError naming the bucket,
// so it matches ErrCorrupt like every other bad record, and bbolt's errors
// are mapped as everywhere else.
func FenceError(err error) error {
	var re *fencestore.RecordError
	if errors.As(err, &re) {
		name := string(fencestore.Root)
		if re.Bucket != nil {
			name += "/" + string(re.Bucket)
		}
		return &RecordError{Bucket: name, Key: string(re.Key), Err: re.Err}
	}
	return MapBoltErr(err)
}
