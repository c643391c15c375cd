package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
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

// TestLoadAcrossWindowsStaysDeduplicated: load writes a dump in batches;
// a batch that holds the end of one window and the start of the next seals
// the first one. Every mark loaded, on either side of the seal, is a
// duplicate in the loaded store after it is reopened (twice: the first
// reopen may rebuild what the second loads).
func TestLoadAcrossWindowsStaysDeduplicated(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "src.db")
	c := &fakeClock{now: t0}
	db := openStore(t, path, c)
	ctx := context.Background()
	const n, later = 1500, 1200 // the marks from later on go into the next window
	for i := range n {
		if i == later {
			c.now = t0.Add(70 * time.Minute)
		}
		key := fmt.Sprint("k", i)
		_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: key, Payload: []byte(key)},
			func(*oncekv.Tx) ([]byte, error) { return []byte("ok"), nil })
		require.NoError(t, err)
	}
	require.NoError(t, db.Close())
	dump := cli(t, "dump", path)
	require.Equal(t, 0, dump.code, dump.stderr)
	file := filepath.Join(dir, "dump.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(dump.stdout), 0o600))
	moved := filepath.Join(dir, "moved.db")
	r := cli(t, "load", moved, file, "-now", at(3*time.Hour))
	require.Equal(t, 0, r.code, r.stderr)

	c.now = t0.Add(3 * time.Hour)
	for range 2 {
		db = openStore(t, moved, c)
		ran := 0
		for i := range n {
			key := fmt.Sprint("k", i)
			res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: key, Payload: []byte(key)},
				func(*oncekv.Tx) ([]byte, error) { ran++; return nil, nil })
			require.NoError(t, err)
			require.True(t, res.Duplicate || ran > 0, key)
		}
		require.Zero(t, ran, "loaded keys run again after a reopen")
		require.NoError(t, db.Close())
	}
}
