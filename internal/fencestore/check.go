package fencestore

import (
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Check decodes every entry of fences, the system bucket of fences: the
// token counters, the claim counter and every key record of every user
// bucket. It calls fn with a *RecordError for each entry that does not
// decode, and goes on to the next, until fn returns an error, which Check
// returns. It writes nothing; it is the fences' part of a store check.
func Check(fences *bolt.Bucket, fn func(*RecordError) error) error {
	return fences.ForEach(func(k, v []byte) error {
		var err error
		switch {
		case len(k) == 0:
			err = errors.New("empty key")
		case k[0] == kindKeys && v == nil:
			return checkKeys(fences.Bucket(k), k, fn)
		case k[0] == kindKeys:
			err = errors.New("key records entry is a value, not a bucket")
		case k[0] != kindToken && k[0] != kindClaim:
			err = fmt.Errorf("unknown entry kind %q", k[0])
		case v == nil:
			err = errors.New("counter is a bucket, not a value")
		default:
			var n uint64
			err = unsealInts(v, &n)
		}
		if err != nil {
			return fn(&RecordError{Key: k, Err: err})
		}
		return nil
	})
}

// checkKeys checks the key records of one user bucket, the sub-bucket name.
func checkKeys(b *bolt.Bucket, name []byte, fn func(*RecordError) error) error {
	return b.ForEach(func(k, v []byte) error {
		var r Record
		if v == nil {
			return fn(&RecordError{Bucket: name, Key: k, Err: errors.New("key record is a bucket, not a value")})
		}
		if err := r.UnmarshalBinary(v); err != nil {
			return fn(&RecordError{Bucket: name, Key: k, Err: err})
		}
		return nil
	})
}
