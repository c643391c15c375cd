package oncekv

import (
	"bytes"
	"fmt"

	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/fencestore"
)

// TokenCounter is one of the store's fencing-token counters: Last is the
// last token issued for Resource (by NextFence, Tx.NextFence, a queue's
// leases), or the last claim token when Resource is empty (NextFence
// refuses an empty resource, so the two never meet).
type TokenCounter struct {
	Resource string
	Last     uint64
}

// KeyFence is the fence and version a user key carries (see
// Bucket.PutFenced and Bucket.PutIfVersion). Deleted is set for a key that
// keeps them without a value: a deleted key, or a key of a deleted bucket,
// so that a stale writer cannot bring it back.
type KeyFence struct {
	Bucket, Key    []byte
	Fence, Version uint64
	Deleted        bool
}

// TokenCounters calls fn with every token counter of the store, in one
// read transaction: with KeyFences, what a copy of the store made through
// Marks and the user buckets (oncekv dump) needs besides, so that the
// copy never issues a token the far side has seen already. An error from
// fn stops the listing and is returned. Errors: a *RecordError (matching
// ErrCorrupt) for a counter that does not decode; ErrClosed.
func (db *DB) TokenCounters(fn func(TokenCounter) error) error {
	return db.View(func(tx *Tx) error {
		root := tx.btx.Bucket(fencestore.Root)
		if root == nil {
			return fmt.Errorf("%w: system bucket %q is missing", ErrCorrupt, fencestore.Root)
		}
		return base.FenceError(fencestore.EachCounter(root, func(resource []byte, last uint64) error {
			return fn(TokenCounter{Resource: string(resource), Last: last})
		}))
	})
}

// KeyFences calls fn with the fence and version of every user key that
// has them, deleted keys and the keys of deleted buckets included, in one
// read transaction; the slices are fn's to keep. An error from fn stops
// the listing and is returned. Errors: a *RecordError (matching
// ErrCorrupt) for a record that does not decode; ErrClosed.
func (db *DB) KeyFences(fn func(KeyFence) error) error {
	return db.View(func(tx *Tx) error {
		return base.KeyFences.Each(tx.btx, func(bucket, key []byte, r fencestore.Record, live bool) error {
			return fn(KeyFence{Bucket: bytes.Clone(bucket), Key: bytes.Clone(key),
				Fence: r.Fence, Version: r.Version, Deleted: !live})
		})
	})
}

// RaiseTokenCounter makes the counter c names at least c.Last, in tx, so
// that every token issued from then on is greater than c.Last; a counter
// there or above already is left as it is. It never lowers a counter, so
// it breaks no promise of the store: it is how a store loaded from a dump
// goes on from where the other one was. Errors: ErrTxNotWritable,
// ErrTxClosed, ErrKeyTooLarge for a resource over bbolt's key limit,
// ErrCorrupt.
func (tx *Tx) RaiseTokenCounter(c TokenCounter) error {
	if err := tx.checkWrite(); err != nil {
		return err
	}
	root := tx.btx.Bucket(fencestore.Root)
	if root == nil {
		return fmt.Errorf("%w: system bucket %q is missing", ErrCorrupt, fencestore.Root)
	}
	var resource []byte
	if c.Resource != "" {
		if len(c.Resource) > fencestore.MaxResourceSize {
			return &resourceError{resource: c.Resource, err: fmt.Errorf("%w: %d bytes, over %d",
				ErrKeyTooLarge, len(c.Resource), fencestore.MaxResourceSize)}
		}
		resource = []byte(c.Resource)
	}
	if err := fencestore.RaiseCounter(root, resource, c.Last); err != nil {
		return &resourceError{resource: c.Resource, err: base.FenceError(err)}
	}
	return nil
}

// RaiseKeyFence makes the fence and the version of key f.Key in the user
// bucket f.Bucket at least f.Fence and f.Version, in tx, keeping the
// key's value (f.Deleted is not read: a key without a value keeps them as
// a deleted key does, and a bucket that does not exist keeps them for
// when it is created). It never lowers either, so a stale writer stays
// fenced off and a compare-and-set that read the key before stays refused:
// it is how a store loaded from a dump keeps its keys' fences. Errors:
// ErrTxNotWritable, ErrTxClosed, ErrBucketNameRequired, ErrKeyRequired,
// ErrKeyTooLarge, ErrCorrupt for a record that does not decode.
func (tx *Tx) RaiseKeyFence(f KeyFence) error {
	if err := tx.checkWrite(); err != nil {
		return err
	}
	return base.KeyFences.Raise(tx.btx, &tx.life, f.Bucket, f.Key, fencestore.Record{Fence: f.Fence, Version: f.Version})
}
