package fencestore

import (
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/fence"
)

// Moving a store (a dump loaded into another file) must carry every
// number a promise rests on: the token counters, so that no token is
// issued twice, and the key records, so that a stale writer stays fenced
// off and a compare-and-set that read a key before the move fails after
// it. These functions list them and raise them; nothing here lowers one.

// EachCounter calls fn with every token counter in fences, the system
// bucket of fences: the last token issued for resource, or for the claim
// tokens when resource is nil. A counter that does not decode is a
// *RecordError.
func EachCounter(fences *bolt.Bucket, fn func(resource []byte, last uint64) error) error {
	c := fences.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v == nil || (k[0] != kindToken && k[0] != kindClaim) {
			continue
		}
		var last uint64
		if err := unsealInts(v, &last); err != nil {
			return &RecordError{Key: k, Err: err}
		}
		var resource []byte
		if k[0] == kindToken {
			resource = k[1:]
		}
		if err := fn(resource, last); err != nil {
			return err
		}
	}
	return nil
}

// RaiseCounter makes the counter of resource (nil: the claim tokens) at
// least last: the next token issued is greater than last. A counter
// already there or above is left as it is.
func RaiseCounter(fences *bolt.Bucket, resource []byte, last uint64) error {
	key := claimCounter
	if resource != nil {
		if len(resource) == 0 {
			return fence.ErrResourceRequired
		}
		key = append([]byte{kindToken}, resource...)
	}
	cur, err := counter(fences, key)
	if err != nil || cur >= last {
		return err
	}
	return fences.Put(key, sealInts(last))
}

// EachKeyRecord calls fn with every key record kept in fences: those of
// the user buckets that keep their records there (created before fence
// headers existed) and those a deleted user bucket left behind. A record
// that does not decode is a *RecordError.
func EachKeyRecord(fences *bolt.Bucket, fn func(userBucket, key []byte, r Record) error) error {
	c := fences.Cursor()
	for k, v := c.Seek([]byte{kindKeys}); k != nil && k[0] == kindKeys; k, v = c.Next() {
		if v != nil {
			continue
		}
		b := fences.Bucket(k)
		if b == nil {
			continue
		}
		err := b.ForEach(func(key, raw []byte) error {
			var r Record
			if err := r.UnmarshalBinary(raw); err != nil {
				return &RecordError{Bucket: k, Key: key, Err: err}
			}
			return fn(k[1:], key, r)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Raised returns r with each number at least the one of at: the record of
// a key after a move that carried at.
func Raised(r, at Record) Record {
	return Record{Fence: max(r.Fence, at.Fence), Version: max(r.Version, at.Version)}
}
