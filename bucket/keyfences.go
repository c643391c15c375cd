package bucket

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/fencestore"
)

// The root package lists and raises key records through these, for moving
// a store (DB.KeyFences, Tx.RaiseKeyFence).
func init() {
	base.KeyFences.Each = eachKeyFence
	base.KeyFences.Raise = raiseKeyFence
}

// eachKeyFence calls fn with every key record of the file: those in the
// fences bucket (buckets without headers, deleted buckets), then those in
// the headers of every headered user bucket.
func eachKeyFence(tx *bolt.Tx, fn func(bucket, key []byte, r fencestore.Record, live bool) error) error {
	root := tx.Bucket(fencestore.Root)
	if root == nil {
		return fmt.Errorf("%w: system bucket %q is missing", ErrCorrupt, fencestore.Root)
	}
	err := fencestore.EachKeyRecord(root, func(name, key []byte, r fencestore.Record) error {
		ub := tx.Bucket(base.UserName(name))
		live := ub != nil && ub.Sequence()&seqHeadered == 0 && ub.Get(key) != nil
		return fn(name, key, r, live)
	})
	if err != nil {
		return base.FenceError(err)
	}
	c := tx.Cursor()
	for k, v := c.Seek(base.UserPrefix); k != nil && bytes.HasPrefix(k, base.UserPrefix); k, v = c.Next() {
		ub := tx.Bucket(k)
		if v != nil || ub == nil || ub.Sequence()&seqRecords == 0 {
			continue
		}
		name := k[len(base.UserPrefix):]
		err := ub.ForEach(func(key, raw []byte) error {
			e, err := fencestore.ParseEntry(raw)
			switch {
			case err != nil:
				return entryError(name, key, err)
			case !e.HasRecord:
				return nil
			}
			return fn(name, key, e.Record, e.Exists())
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// raiseKeyFence makes key's record in the user bucket name at least r: in
// the key's header in a headered bucket, else in the fences bucket (which
// a bucket not created yet takes its records from when it is).
func raiseKeyFence(tx *bolt.Tx, life *base.Life, name, key []byte, r fencestore.Record) error {
	if err := checkBucketName(name); err != nil {
		return err
	}
	switch {
	case len(key) == 0:
		return ErrKeyRequired
	case len(key) > MaxKeySize:
		return fmt.Errorf("key of %d bytes in bucket %q: %w", len(key), base.Clip(string(name)), ErrKeyTooLarge)
	}
	if ub := tx.Bucket(base.UserName(name)); ub != nil && ub.Sequence()&seqHeadered != 0 {
		b := &Bucket{b: ub, name: name, life: life}
		e, raw, err := b.entry(key)
		if err != nil {
			return b.wrap("raise fence", key, err)
		}
		r = fencestore.Raised(e.Record, r)
		if raw != nil && e.Exists() {
			return b.putLive("raise fence", key, r, bytes.Clone(e.Value))
		}
		if seq := ub.Sequence(); seq&seqRecords == 0 {
			if err := ub.SetSequence(seq | seqRecords); err != nil {
				return b.wrap("raise fence", key, err)
			}
		}
		return b.wrap("raise fence", key, ub.Put(key, fencestore.AppendGone(nil, r)))
	}
	root := tx.Bucket(fencestore.Root)
	if root == nil {
		return fmt.Errorf("%w: system bucket %q is missing", ErrCorrupt, fencestore.Root)
	}
	keys := life.Keys(root, name)
	cur, _, err := keys.Get(key)
	if err != nil {
		return base.FenceError(err)
	}
	return base.FenceError(keys.Set(key, fencestore.Raised(cur, r)))
}
