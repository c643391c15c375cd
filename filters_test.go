package oncekv_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
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

// newestFilterChildEnv tells a re-executed test binary to run
// newestFilterChild on the store it names.
const newestFilterChildEnv = "ONCEKV_NEWEST_FILTER_CHILD_DB"

// TestNewestFilterRebuiltAfterSIGKILL: a store is closed cleanly, so it
// holds a persisted filter of its newest window; a child process reopens
// it, writes marks into that window and is killed with SIGKILL. The
// persisted filter lacks those marks, so the next Open must rebuild it, and
// every mark the child had written is a duplicate.
func TestNewestFilterRebuiltAfterSIGKILL(t *testing.T) {
	if isChild(newestFilterChildEnv, newestFilterChild) {
		return
	}
	needChildren(t)
	clock := oncetest.NewClock(newestFilterEpoch)
	path := closedStore(t, clock, "parent", 200)

	child, lines := startChild(t, "^TestNewestFilterRebuiltAfterSIGKILL$", newestFilterChildEnv, path)
	var acked []string
	for lines.Scan() {
		line := lines.Text()
		if key, ok := strings.CutPrefix(line, "ACK "); ok {
			acked = append(acked, key)
			continue
		}
		require.Equal(t, "READY", line)
		break
	}
	require.NoError(t, child.kill(nil))
	require.Len(t, acked, 300, "the child acknowledged every mark")

	db, err := oncekv.Open(path, newestFilterOpts(clock))
	require.NoError(t, err)
	defer db.Close()
	for _, key := range acked {
		res, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: key, Payload: []byte(key)}, mustNotRunApply(t))
		require.NoError(t, err)
		require.True(t, res.Duplicate, key)
		require.Equal(t, key, string(res.Response))
	}
	require.Zero(t, applyKeys(t, db, "parent", 200, 4))
	require.Equal(t, 1, oncekv.FiltersRebuiltAtOpen(db), "the persisted filter predates the child's marks")
}

// newestFilterChild reopens the store at path on the parent's clock (so its
// marks go into the same newest window), applies child0 ... child299 one by
// one, durably, printing "ACK key" after each, says READY and waits to be
// killed.
func newestFilterChild(path string) {
	db, err := oncekv.Open(path, newestFilterOpts(oncetest.NewClock(newestFilterEpoch)))
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	for i := range 300 {
		key := "child" + strconv.Itoa(i)
		_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: key, Payload: []byte(key)},
			func(*oncekv.Tx) ([]byte, error) { return []byte(key), nil })
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println("ACK", key)
	}
	fmt.Println("READY")
	select {}
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
