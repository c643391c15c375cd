package oncekv_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// fileState is what must not change when nothing was written: the bytes
// and the modification time.
type fileState struct {
	bytes []byte
	mtime time.Time
}

func statFile(t *testing.T, path string) fileState {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	st, err := os.Stat(path)
	require.NoError(t, err)
	return fileState{raw, st.ModTime()}
}

// seedStore makes a closed store with a done key, a failed key, a claim in
// progress, user data and a fence, and returns its path.
func seedStore(t *testing.T, now func() time.Time) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "seed.db")
	db, err := oncekv.Open(path, &oncekv.Options{Now: now})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = db.Apply(ctx, oncekv.Request{Handler: "deposit", Key: "d-1", Payload: []byte("100")}, deposit("ann", 100))
	require.NoError(t, err)
	_, err = db.Claim(ctx, welcome, time.Hour)
	require.NoError(t, err)
	_, err = db.NextFence("config/x")
	require.NoError(t, err)
	require.NoError(t, db.Close())
	return path
}

// TestReadOnlyRefusesEveryWrite: several read-only DBs share the file, each
// answers duplicates and look-ups, refuses every write with ErrReadOnly,
// and none of them changes a byte of the file, Close included.
func TestReadOnlyRefusesEveryWrite(t *testing.T) {
	clock := oncetest.NewClock(claimEpoch)
	path := seedStore(t, clock.Now)
	before := statFile(t, path)
	// Far past the retention, with expiry every nanosecond: a writable store
	// would drop every window.
	clock.Advance(30 * 24 * time.Hour)
	opts := &oncekv.Options{ReadOnly: true, Now: clock.Now, ExpireInterval: time.Nanosecond}
	a, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	b, err := oncekv.Open(path, opts)
	require.NoError(t, err, "readers share the file")

	// A writer cannot have it while readers do.
	_, err = oncekv.Open(path, &oncekv.Options{OpenTimeout: 100 * time.Millisecond})
	require.ErrorIs(t, err, oncekv.ErrLocked)

	ctx := context.Background()
	for _, db := range []*oncekv.DB{a, b} {
		res, err := db.Apply(ctx, oncekv.Request{Handler: "deposit", Key: "d-1", Payload: []byte("100")}, mustNotApply(t))
		require.NoError(t, err, "a duplicate is answered")
		require.True(t, res.Duplicate)
		require.Equal(t, "ann=100", string(res.Response))
		info, err := db.Mark("deposit", "d-1")
		require.NoError(t, err)
		require.Equal(t, oncekv.MarkDone, info.State)
		require.Equal(t, uint64(100), balance(t, db, "ann"))

		writes := map[string]error{}
		_, writes["apply"] = db.Apply(ctx, oncekv.Request{Handler: "deposit", Key: "d-2"}, deposit("ann", 1))
		_, writes["apply batch"] = db.ApplyBatch(ctx, []oncekv.Request{{Handler: "deposit", Key: "d-3"}}, nil)
		_, writes["claim"] = db.Claim(ctx, oncekv.Request{Handler: "email", Key: "other"}, lease)
		_, writes["claim takeover"] = db.Claim(ctx, welcome, lease) // an orphan: free to take, but not here
		writes["update"] = db.Update(func(*oncekv.Tx) error { return nil })
		writes["forget"] = db.Forget("deposit", "d-1")
		_, writes["expire"] = db.Expire(ctx)
		_, writes["next fence"] = db.NextFence("config/x")
		writes["release claim"] = db.ReleaseClaim(welcome.Handler, welcome.Key, 1)
		for name, err := range writes {
			require.ErrorIs(t, err, oncekv.ErrReadOnly, name)
		}
		require.NoError(t, db.Sync())
		require.Len(t, db.Stats().Windows, 1, "no expiry, in the background or not")
	}
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	after := statFile(t, path)
	require.Equal(t, before.mtime, after.mtime)
	require.True(t, string(before.bytes) == string(after.bytes), "the file is byte for byte as it was")
}

func TestReadOnlyNeedsAnOncekvFile(t *testing.T) {
	_, err := oncekv.Open(filepath.Join(t.TempDir(), "missing.db"), &oncekv.Options{ReadOnly: true})
	require.ErrorIs(t, err, os.ErrNotExist, "read-only never creates")

	// An empty file (created by touch, or by a crash before bbolt's first
	// pages) is refused with a typed error, and left empty.
	empty := filepath.Join(t.TempDir(), "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, err = oncekv.Open(empty, &oncekv.Options{ReadOnly: true})
	require.ErrorIs(t, err, oncekv.ErrReadOnly)
	require.Contains(t, err.Error(), "empty")
	info, err := os.Stat(empty)
	require.NoError(t, err)
	require.Zero(t, info.Size())
}

// TestCloseWritesOnlyWhatChanged: opening and closing a store untouched
// leaves the file as it was (no commit, no fsync); once the store's clock
// has read past what the file holds, Close saves it, so a clock stepped
// back across the restart does not turn the store's clock back.
func TestCloseWritesOnlyWhatChanged(t *testing.T) {
	clock := oncetest.NewClock(claimEpoch)
	path := seedStore(t, clock.Now)
	clock.Advance(time.Hour)
	before := statFile(t, path)
	db, err := oncekv.Open(path, &oncekv.Options{Now: clock.Now, ExpireInterval: -1})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.Zero(t, db.Stats().Commits, "Close committed nothing")
	after := statFile(t, path)
	require.Equal(t, before.mtime, after.mtime)
	require.True(t, string(before.bytes) == string(after.bytes), "the file is byte for byte as it was")

	db, err = oncekv.Open(path, &oncekv.Options{Now: clock.Now, ExpireInterval: -1})
	require.NoError(t, err)
	high := db.Now() // a reading past the saved one
	require.NoError(t, db.Close())
	require.Equal(t, uint64(1), db.Stats().Commits, "Close saved the clock")
	clock.Advance(-24 * time.Hour)
	db, err = oncekv.Open(path, &oncekv.Options{Now: clock.Now, ExpireInterval: -1})
	require.NoError(t, err)
	require.False(t, db.Now().Before(high))
	require.NoError(t, db.Close())
}
