package oncekv_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// fileTxID is the last committed bbolt transaction of the closed file at
// path.
func fileTxID(t *testing.T, path string) int {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer b.Close()
	tx, err := b.Begin(false)
	require.NoError(t, err)
	defer tx.Rollback()
	return tx.ID()
}

// liveTxID is the last committed transaction of the open store db, read
// from a backup of it (a backup keeps its source's transaction number).
func liveTxID(t *testing.T, db *oncekv.DB) int {
	t.Helper()
	probe := filepath.Join(t.TempDir(), "probe.db")
	_, err := db.BackupFile(probe)
	require.NoError(t, err)
	return fileTxID(t, probe)
}

// TestCompactedStoreNeverTrustsAStaleNewestFilter: bbolt's compaction
// numbers transactions afresh, so a compacted store's transactions later
// pass the number the copied filter stamp holds. A store that, at that very
// transaction, has as many marks in a small (inline, root page 0) newest
// window as when the filter was written, but another set of them, must not
// load that filter: a backup taken then, opened elsewhere, would answer a
// key the filter never learnt as unseen and run its effect a second time.
// The store that writes the copy may run with its filters off.
func TestCompactedStoreNeverTrustsAStaleNewestFilter(t *testing.T) {
	for _, filters := range []bool{true, false} {
		t.Run(map[bool]string{true: "filters on", false: "filters off"}[filters], func(t *testing.T) {
			compactedStaleFilter(t, filters)
		})
	}
}

func compactedStaleFilter(t *testing.T, filters bool) {
	ctx := context.Background()
	clock := oncetest.NewClock(newestFilterEpoch)
	dir := t.TempDir()
	src := filepath.Join(dir, "src.db")
	opts := newestFilterOpts(clock)
	db, err := oncekv.Open(src, opts)
	require.NoError(t, err)
	for _, k := range []string{"a", "b", "c"} {
		applyKey(t, db, k)
	}
	// Enough commits that the stamp's number is well past what the
	// compacted copy starts at.
	for range 40 {
		require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("user"))
			if err != nil {
				return err
			}
			return b.Put([]byte("k"), []byte("v"))
		}))
	}
	require.NoError(t, db.Close()) // persists the filter of {a, b, c}
	stamped := fileTxID(t, src)

	dst := filepath.Join(dir, "dst.db")
	from, err := bolt.Open(src, 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	to, err := bolt.Open(dst, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, bolt.Compact(to, from, 64<<20))
	require.NoError(t, to.Close())
	require.NoError(t, from.Close())
	require.Less(t, fileTxID(t, dst), stamped)

	writer := *opts
	if !filters {
		writer.BloomFalsePositiveRate = -1
	}
	db, err = oncekv.Open(dst, &writer)
	require.NoError(t, err)
	require.NoError(t, db.Forget("h", "a"))
	runs := 0
	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "d", Payload: []byte("d")}, counted(&runs))
	require.NoError(t, err)
	require.Equal(t, 1, runs)
	// Commit outside the windows until the file is at the stamp's number.
	for now := liveTxID(t, db); now < stamped; now++ {
		require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
			return tx.Bucket([]byte("user")).Put([]byte("k"), []byte("w"))
		}))
	}
	copyPath := filepath.Join(dir, "copy.db")
	_, err = db.BackupFile(copyPath)
	require.NoError(t, err)
	require.Equal(t, stamped, fileTxID(t, copyPath))
	require.NoError(t, db.Close())

	elsewhere, err := oncekv.Open(copyPath, opts)
	require.NoError(t, err)
	defer elsewhere.Close()
	res, err := elsewhere.Apply(ctx, oncekv.Request{Handler: "h", Key: "d", Payload: []byte("d")}, counted(&runs))
	require.NoError(t, err)
	require.True(t, res.Duplicate, "d's effect ran twice: the copy trusted a filter written before d")
	require.Equal(t, 1, runs)
}
