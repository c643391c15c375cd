package fencestore_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/fencestore"
)

// TestCheck: every entry kind is decoded, and each bad one is reported by
// sub-bucket and key, after which the walk goes on.
func TestCheck(t *testing.T) {
	update := openFences(t)
	check := func(fb *bolt.Bucket) (got []string) {
		require.NoError(t, fencestore.Check(fb, func(e *fencestore.RecordError) error {
			got = append(got, string(e.Bucket)+"|"+string(e.Key))
			return nil
		}))
		return got
	}
	require.NoError(t, update(func(fb *bolt.Bucket) error {
		_, err := fencestore.Next(fb, []byte("printer"))
		require.NoError(t, err)
		_, err = fencestore.NextClaim(fb)
		require.NoError(t, err)
		keys := fencestore.OpenKeys(fb, []byte("stock"))
		require.NoError(t, keys.Fenced([]byte("apples"), 3))
		require.NoError(t, keys.Fenced([]byte("pears"), 4))
		require.Empty(t, check(fb), "a sound bucket")

		raw := append([]byte(nil), fb.Get([]byte("tprinter"))...)
		raw[2] ^= 1
		require.NoError(t, fb.Put([]byte("tprinter"), raw))
		require.NoError(t, fb.Bucket([]byte("kstock")).Put([]byte("apples"), []byte("junk")))
		require.NoError(t, fb.Put([]byte("x?"), []byte("stray")))
		require.Equal(t, []string{"kstock|apples", "|tprinter", "|x?"}, check(fb))

		stop := errors.New("stop")
		require.ErrorIs(t, fencestore.Check(fb, func(*fencestore.RecordError) error { return stop }), stop)
		return nil
	}))
}
