package oncetest

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// countsBucket holds, per key, how many times an effect applied it.
var countsBucket = []byte("oncetest-applied")

// CountApply is the body of a test effect that proves keys are applied
// once: it adds one to key's count in tx, so the count commits with the
// key's mark, and a count above 1 is a double application.
func CountApply(tx *oncekv.Tx, key []byte) ([]byte, error) {
	b, err := tx.CreateBucketIfNotExists(countsBucket)
	if err != nil {
		return nil, err
	}
	var n uint64
	if v := b.Get(key); len(v) == 8 {
		n = binary.BigEndian.Uint64(v)
	}
	return nil, b.Put(key, binary.BigEndian.AppendUint64(nil, n+1))
}

// RequireAppliedOnce requires that CountApply counted each key of want
// exactly once (none lost, none doubled) and no other key.
func RequireAppliedOnce(t testing.TB, db *oncekv.DB, want []string) {
	t.Helper()
	got := make(map[string]uint64)
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket(countsBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			got[string(k)] = binary.BigEndian.Uint64(v)
			return nil
		})
	}))
	lost, doubled := 0, 0
	for _, k := range want {
		switch n := got[k]; {
		case n == 0:
			lost++
		case n > 1:
			doubled++
		}
	}
	require.Zero(t, lost, "keys never applied")
	require.Zero(t, doubled, "keys applied more than once")
	require.Len(t, got, len(want), "keys applied that were never sent")
}
