// Package applycount is the effect the transport adapters' tests apply: it
// adds one to a key's count in a user bucket, in the transaction of the
// key's mark, so that a test can read back how many times each key's
// effect committed and prove it was exactly once.
package applycount

import (
	"encoding/binary"
	"fmt"

	"github.com/oncekv/oncekv"
)

// Bucket is the user bucket of the counts.
var Bucket = []byte("applied")

// Add adds one to key's count in tx.
func Add(tx *oncekv.Tx, key string) error {
	b, err := tx.CreateBucketIfNotExists(Bucket)
	if err != nil {
		return err
	}
	var n uint64
	if v := b.Get([]byte(key)); len(v) == 8 {
		n = binary.BigEndian.Uint64(v)
	}
	return b.Put([]byte(key), binary.BigEndian.AppendUint64(nil, n+1))
}

// Read returns every key's count in db.
func Read(db *oncekv.DB) (map[string]uint64, error) {
	out := make(map[string]uint64)
	err := db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket(Bucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("oncekv: applycount: count of %q is %d bytes, want 8", k, len(v))
			}
			out[string(k)] = binary.BigEndian.Uint64(v)
			return nil
		})
	})
	return out, err
}
