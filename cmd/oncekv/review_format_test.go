package main_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/layout"
)

// TestCompactLeavesNoNewestFilterStamp: compact copies the store into a
// file whose transactions are numbered afresh, so the stamp that proved
// the source's persisted newest-window filter current must not come along
// (one of the copy's later transactions could bear its number, and a
// filter lacking keys be trusted); the copy still checks clean and answers
// its marks.
func TestCompactLeavesNoNewestFilterStamp(t *testing.T) {
	path := fixture(t)
	closed := func(path string) (found bool) {
		t.Helper()
		b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
		require.NoError(t, err)
		defer b.Close()
		require.NoError(t, b.View(func(tx *bolt.Tx) error {
			found = tx.Bucket(layout.ClosedRoot) != nil
			return nil
		}))
		return found
	}
	require.True(t, closed(path), "the fixture's clean Close persisted the filter")
	dst := filepath.Join(t.TempDir(), "compact.db")
	r := cli(t, "compact", path, dst)
	require.Equal(t, 0, r.code, r.stderr)
	require.False(t, closed(dst))
	require.Equal(t, 0, cli(t, "check", dst).code)
	r = cli(t, "mark", dst, "pay", "order-1")
	require.Equal(t, 0, r.code, r.stderr)
}
