package oncekv_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// The newest window's Bloom filter is persisted by a clean Close and loaded
// by the next Open only when the file proves it current; any doubt means a
// rebuild from the window's keys. These tests watch which one Open did
// through oncekv.FiltersRebuiltAtOpen, and check, with the filters in
// charge (no filter hook), that every mark is still a duplicate: a filter
// missing a committed key would run that key's effect again.

var newestFilterEpoch = time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC)

func newestFilterOpts(clock *oncetest.Clock) *oncekv.Options {
	return &oncekv.Options{Now: clock.Now, ExpireInterval: -1, WindowSpan: time.Hour}
}

// closedStore makes a store on clock holding prefix0 ... prefix<n-1>,
// applied by concurrent callers, closes it cleanly and returns its path.
func closedStore(t *testing.T, clock *oncetest.Clock, prefix string, n int) string {
	t.Helper()
	path := t.TempDir() + "/x.db"
	db, err := oncekv.Open(path, newestFilterOpts(clock))
	require.NoError(t, err)
	require.Equal(t, n, applyKeys(t, db, prefix, n, 4))
	require.NoError(t, db.Close())
	return path
}

// TestCleanCloseLoadsNewestFilter: after a clean Close, Open loads the
// newest window's filter instead of reading its keys, every mark written
// before (by concurrent callers) is a duplicate, and an untouched open and
// close leaves the file byte for byte as it was. A Close after new marks
// persists the filter again.
func TestCleanCloseLoadsNewestFilter(t *testing.T) {
	clock := oncetest.NewClock(newestFilterEpoch)
	path := closedStore(t, clock, "a", 3000)

	before := statFile(t, path)
	db, err := oncekv.Open(path, newestFilterOpts(clock))
	require.NoError(t, err)
	require.Zero(t, oncekv.FiltersRebuiltAtOpen(db), "the filter came from the file")
	require.Zero(t, applyKeys(t, db, "a", 3000, 8), "every key is a duplicate")
	require.NoError(t, db.Close())
	require.Zero(t, db.Stats().Commits, "nothing to save")
	after := statFile(t, path)
	require.True(t, bytes.Equal(before.bytes, after.bytes), "the file is byte for byte as it was")

	db, err = oncekv.Open(path, newestFilterOpts(clock))
	require.NoError(t, err)
	require.Equal(t, 100, applyKeys(t, db, "b", 100, 4))
	require.NoError(t, db.Close())

	db, err = oncekv.Open(path, newestFilterOpts(clock))
	require.NoError(t, err)
	defer db.Close()
	require.Zero(t, oncekv.FiltersRebuiltAtOpen(db), "Close persisted the filter with the new marks")
	require.Zero(t, applyKeys(t, db, "a", 3000, 2)+applyKeys(t, db, "b", 100, 2))
	require.Equal(t, 1, applyKeys(t, db, "c", 1, 1), "an unseen key still runs")
}

// TestDamagedNewestFilterIsRebuilt: a persisted newest-window filter or
// stamp damaged on disk (a byte flipped in place, no commit) is rebuilt,
// with a warning; DB.Check reports it; the next clean Close writes a good
// one.
func TestDamagedNewestFilterIsRebuilt(t *testing.T) {
	for _, key := range []string{"filter", "stamp"} {
		t.Run(key, func(t *testing.T) {
			clock := oncetest.NewClock(newestFilterEpoch)
			path := closedStore(t, clock, "a", 500)
			flipClosedRecord(t, path, key)

			var logs lockedBuffer
			opts := newestFilterOpts(clock)
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			db, err := oncekv.Open(path, opts)
			require.NoError(t, err)
			require.Equal(t, 1, oncekv.FiltersRebuiltAtOpen(db))
			require.Contains(t, logs.String(), "level=WARN msg=\"rebuilding a window's Bloom filter\"")
			require.Zero(t, applyKeys(t, db, "a", 500, 4))
			var problems []error
			require.NoError(t, db.Check(func(p error) error { problems = append(problems, p); return nil }))
			require.Len(t, problems, 1)
			require.ErrorIs(t, problems[0], oncekv.ErrCorrupt)
			require.Contains(t, problems[0].Error(), string(layout.ClosedRoot))
			require.NoError(t, db.Close())

			db, err = oncekv.Open(path, newestFilterOpts(clock))
			require.NoError(t, err)
			defer db.Close()
			require.Zero(t, oncekv.FiltersRebuiltAtOpen(db), "Close replaced the damaged record")
			require.Zero(t, applyKeys(t, db, "a", 500, 4))
			require.NoError(t, db.Check(func(p error) error { return p }))
		})
	}
}

// flipClosedRecord flips one byte in the middle of the record key of the
// persisted newest-window filter, in place in the file, as a bad disk
// would: bbolt's own structure and its transaction id stay as they were.
func flipClosedRecord(t *testing.T, path, key string) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	var value []byte
	require.NoError(t, b.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(layout.ClosedRoot)
		require.NotNil(t, bk, "a clean Close persisted the filter")
		value = bytes.Clone(bk.Get([]byte(key)))
		return nil
	}))
	require.NoError(t, b.Close())
	require.NotEmpty(t, value)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, 1, bytes.Count(raw, value), "the record is where it can be found")
	raw[bytes.Index(raw, value)+len(value)/2] ^= 0x10
	require.NoError(t, os.WriteFile(path, raw, 0o600))
}

// TestReadOnlyOpenLoadsNewestFilter: a read-only Open of a cleanly closed
// store loads the persisted filter and answers duplicates through it; of a
// store written since, it rebuilds (and, read-only, writes nothing).
func TestReadOnlyOpenLoadsNewestFilter(t *testing.T) {
	clock := oncetest.NewClock(newestFilterEpoch)
	path := closedStore(t, clock, "a", 400)

	ro := newestFilterOpts(clock)
	ro.ReadOnly = true
	db, err := oncekv.Open(path, ro)
	require.NoError(t, err)
	require.Zero(t, oncekv.FiltersRebuiltAtOpen(db))
	require.Zero(t, applyKeys(t, db, "a", 400, 4), "duplicates, answered read-only")
	require.NoError(t, db.Close())

	commitBehind(t, path)
	before := statFile(t, path)
	db, err = oncekv.Open(path, ro)
	require.NoError(t, err)
	require.Equal(t, 1, oncekv.FiltersRebuiltAtOpen(db), "the file moved past the stamp")
	require.Zero(t, applyKeys(t, db, "a", 400, 4))
	require.NoError(t, db.Close())
	require.True(t, bytes.Equal(before.bytes, statFile(t, path).bytes), "read-only wrote nothing")
}

// TestNewestFilterAfterWritesWithoutFilters: a process with the filters
// off writes marks into the newest window and closes cleanly, persisting no
// filter; the filter persisted before then is stale, and the next Open with
// the filters on rebuilds it rather than miss the new marks.
func TestNewestFilterAfterWritesWithoutFilters(t *testing.T) {
	clock := oncetest.NewClock(newestFilterEpoch)
	path := closedStore(t, clock, "a", 100)

	off := newestFilterOpts(clock)
	off.BloomFalsePositiveRate = -1
	db, err := oncekv.Open(path, off)
	require.NoError(t, err)
	require.Equal(t, 100, applyKeys(t, db, "off", 100, 2))
	require.NoError(t, db.Close())

	db, err = oncekv.Open(path, newestFilterOpts(clock))
	require.NoError(t, err)
	defer db.Close()
	require.Zero(t, applyKeys(t, db, "off", 100, 2)+applyKeys(t, db, "a", 100, 2))
	require.Equal(t, 1, oncekv.FiltersRebuiltAtOpen(db))
}

// TestMissingFiltersArePersistedAtClose: a store whose sealed windows lost
// their persisted filters and which has no persisted newest filter (as a
// file written before it existed) opens by rebuilding them all; the next
// clean Close persists them, and the Open after loads every one. Legacy
// (version 1) files take the same path after their upgrade.
func TestMissingFiltersArePersistedAtClose(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			clock := oncetest.NewClock(newestFilterEpoch)
			path := t.TempDir() + "/x.db"
			db, err := oncekv.Open(path, newestFilterOpts(clock))
			require.NoError(t, err)
			for w := range 3 {
				require.Equal(t, 200, applyKeys(t, db, "w"+strconv.Itoa(w)+"-", 200, 2))
				clock.Advance(time.Hour)
			}
			require.NoError(t, db.Close())
			if legacy {
				makeLegacy(t, path)
			} else {
				dropPersistedFilters(t, path)
			}

			db, err = oncekv.Open(path, newestFilterOpts(clock))
			require.NoError(t, err)
			require.Equal(t, 3, oncekv.FiltersRebuiltAtOpen(db))
			require.Zero(t, applyKeys(t, db, "w2-", 200, 2))
			require.NoError(t, db.Close())
			require.Equal(t, uint32(layout.FormatVersion), fileFormat(t, path).Version)

			db, err = oncekv.Open(path, newestFilterOpts(clock))
			require.NoError(t, err)
			defer db.Close()
			require.Zero(t, oncekv.FiltersRebuiltAtOpen(db))
			for w := range 3 {
				require.Zero(t, applyKeys(t, db, "w"+strconv.Itoa(w)+"-", 200, 2), "window %d", w)
			}
		})
	}
}

// dropPersistedFilters deletes every persisted filter from the closed store
// at path, leaving the buckets.
func dropPersistedFilters(t *testing.T, path string) {
	t.Helper()
	updateBolt(t, path, func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(layout.ClosedRoot); err != nil {
			return err
		}
		f := tx.Bucket(layout.FiltersRoot)
		var keys [][]byte
		require.NoError(t, f.ForEach(func(k, _ []byte) error { keys = append(keys, bytes.Clone(k)); return nil }))
		require.Len(t, keys, 2, "the two sealed windows' filters")
		for _, k := range keys {
			if err := f.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestReopenLoadsSealedFiltersAndRebuildsTheRest checks that a reopened store
// answers exactly as before: filters persisted for sealed windows, the
// newest one rebuilt, and a damaged persisted filter rebuilt too.
func TestReopenLoadsSealedFiltersAndRebuildsTheRest(t *testing.T) {
	clock := oncetest.NewClock(epoch)
	opts := windowOpts(clock)
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	var keys []string
	for hour := range 5 {
		for i := range 300 {
			k := fmt.Sprintf("h%d-%d", hour, i)
			keys = append(keys, k)
			applyKey(t, db, k)
		}
		clock.Advance(time.Hour)
	}
	before := db.Stats()
	require.NoError(t, db.Close())

	probe := func(db *oncekv.DB) oncekv.Stats {
		start := db.Stats()
		for _, k := range keys {
			require.True(t, applyKey(t, db, k).Duplicate, k)
		}
		for i := range 2000 {
			res, err := db.Apply(context.Background(), oncekv.Request{Handler: "probe", Key: fmt.Sprint(i)}, nil)
			require.NoError(t, err)
			require.False(t, res.Duplicate)
		}
		return db.Stats().Sub(start)
	}

	// A copy with every persisted filter damaged: Open must rebuild them,
	// not trust them.
	damaged := filepath.Join(t.TempDir(), "damaged.db")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(damaged, raw, 0o600))
	b, err := bolt.Open(damaged, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		f := tx.Bucket(layout.FiltersRoot)
		n := 0
		require.NoError(t, f.ForEach(func(k, v []byte) error {
			n++
			v = append([]byte(nil), v...)
			v[len(v)/2] ^= 0xff
			return f.Put(append([]byte(nil), k...), v)
		}))
		require.Equal(t, 4, n, "the four sealed windows have persisted filters")
		return nil
	}))
	require.NoError(t, b.Close())

	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	require.Equal(t, before.Windows, db.Stats().Windows, "same windows, marks and filter sizes after reopen")
	loaded := probe(db)
	require.NoError(t, db.Close())
	oncetest.Check(t, path)

	db, err = oncekv.Open(damaged, opts)
	require.NoError(t, err)
	rebuilt := probe(db)
	require.NoError(t, db.Close())

	require.Positive(t, loaded.BloomNegatives)
	require.Less(t, float64(loaded.BloomFalsePositives), 0.03*float64(loaded.BloomNegatives+loaded.BloomFalsePositives))
	require.InDelta(t, float64(loaded.BloomNegatives), float64(rebuilt.BloomNegatives), 0.02*float64(loaded.BloomNegatives),
		"persisted and rebuilt filters rule out about as many look-ups")
}

func TestFiltersDisabledStayCorrect(t *testing.T) {
	clock := oncetest.NewClock(epoch)
	opts := windowOpts(clock)
	opts.BloomFalsePositiveRate = -1
	db := oncetest.Open(t, opts)
	for hour := range 3 {
		applyKey(t, db, fmt.Sprint("k", hour))
		clock.Advance(time.Hour)
	}
	for hour := range 3 {
		require.True(t, applyKey(t, db, fmt.Sprint("k", hour)).Duplicate)
	}
	st := db.Stats()
	require.Zero(t, st.BloomNegatives)
	for _, w := range st.Windows {
		require.Zero(t, w.FilterBytes)
	}
}

// TestFiltersBucketIsChecked: a new file has the filters bucket from the
// start, and a current-format file without it is corrupt: Open says so,
// naming the bucket, and writes nothing.
func TestFiltersBucketIsChecked(t *testing.T) {
	clock := oncetest.NewClock(epoch)
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := oncekv.Open(path, timeOpts(clock, time.Hour, 24*time.Hour))
	require.NoError(t, err)
	require.NoError(t, db.Close())

	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		require.NotNil(t, tx.Bucket(layout.FiltersRoot), "created with the file")
		return tx.DeleteBucket(layout.FiltersRoot)
	}))
	require.NoError(t, b.Close())

	_, err = oncekv.Open(path, timeOpts(clock, time.Hour, 24*time.Hour))
	require.ErrorIs(t, err, oncekv.ErrCorrupt)
	require.Contains(t, err.Error(), "oncekv.filters")
	require.Equal(t, uint32(layout.FormatVersion), fileFormat(t, path).Version)
}

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
