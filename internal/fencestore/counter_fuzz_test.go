package fencestore_test

import (
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/fence"
	"github.com/oncekv/oncekv/internal/fencestore"
)

// FuzzCounter stores arbitrary bytes as the claim token counter and the
// token counter of a resource, then asks for the next token: no input
// panics, a counter that does not decode is a *fencestore.RecordError (never a
// token that could repeat one issued before), and one that decodes gives
// exactly one more, which the next call then follows.
func FuzzCounter(f *testing.F) {
	db, err := bolt.Open(filepath.Join(f.TempDir(), "fuzz.db"), 0o600, &bolt.Options{NoSync: true})
	require.NoError(f, err)
	f.Cleanup(func() { require.NoError(f, db.Close()) })
	// Real counters as seeds: issue a few tokens and read them back.
	require.NoError(f, db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("seed"))
		if err != nil {
			return err
		}
		for range 3 {
			if _, err := fencestore.NextClaim(b); err != nil {
				return err
			}
		}
		return b.ForEach(func(_, v []byte) error {
			f.Add(append([]byte(nil), v...))
			return nil
		})
	}))
	f.Add([]byte{})
	f.Add([]byte{1, 0x91, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

	f.Fuzz(func(t *testing.T, raw []byte) {
		err := db.Update(func(tx *bolt.Tx) error {
			_ = tx.DeleteBucket([]byte("fences"))
			b, err := tx.CreateBucket([]byte("fences"))
			if err != nil {
				return err
			}
			// Find the counter's key by issuing one token, then overwrite it.
			if _, err := fencestore.NextClaim(b); err != nil {
				return err
			}
			var key []byte
			require.NoError(t, b.ForEach(func(k, _ []byte) error { key = append([]byte(nil), k...); return nil }))
			require.NoError(t, b.Put(key, raw))
			first, err := fencestore.NextClaim(b)
			if err != nil {
				var re *fencestore.RecordError
				if !errors.As(err, &re) && !errors.Is(err, fence.ErrExhausted) {
					t.Fatalf("unexpected error for %x: %v", raw, err)
				}
				return nil
			}
			require.NotZero(t, first)
			second, err := fencestore.NextClaim(b)
			if first == math.MaxUint64 {
				require.ErrorIs(t, err, fence.ErrExhausted)
				return nil
			}
			require.NoError(t, err)
			require.Equal(t, first+1, second)
			return nil
		})
		require.NoError(t, err)
	})
}
