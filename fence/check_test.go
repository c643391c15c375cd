package fence_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/fence"
)

// TestCheck: every entry kind is decoded, and each bad one is reported by
// sub-bucket and key, after which the walk goes on.
func TestCheck(t *testing.T) {
	update := openFences(t)
	check := func(fences *bolt.Bucket) (got []string) {
		require.NoError(t, fence.Check(fences, func(e *fence.RecordError) error {
			got = append(got, string(e.Bucket)+"|"+string(e.Key))
			return nil
		}))
		return got
	}
	require.NoError(t, update(func(fences *bolt.Bucket) error {
		_, err := fence.Next(fences, []byte("printer"))
		require.NoError(t, err)
		_, err = fence.NextClaim(fences)
		require.NoError(t, err)
		keys := fence.OpenKeys(fences, []byte("stock"))
		require.NoError(t, keys.Fenced([]byte("apples"), 3))
		require.NoError(t, keys.Fenced([]byte("pears"), 4))
		require.Empty(t, check(fences), "a sound bucket")

		raw := append([]byte(nil), fences.Get([]byte("tprinter"))...)
		raw[2] ^= 1
		require.NoError(t, fences.Put([]byte("tprinter"), raw))
		require.NoError(t, fences.Bucket([]byte("kstock")).Put([]byte("apples"), []byte("junk")))
		require.NoError(t, fences.Put([]byte("x?"), []byte("stray")))
		require.Equal(t, []string{"kstock|apples", "|tprinter", "|x?"}, check(fences))

		stop := errors.New("stop")
		require.ErrorIs(t, fence.Check(fences, func(*fence.RecordError) error { return stop }), stop)
		return nil
	}))
}
