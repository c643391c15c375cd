package oncekv_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/fencestore"
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

// TestVersion2BucketsBesideHeaderedOnes: in a format 2 file upgraded by a
// writable open, a bucket of the old layout keeps returning its values byte
// for byte, even values that happen to be well-formed fence headers, and
// keeps its keys' fences in the records bucket; a bucket created after the
// upgrade stores the same values behind headers and returns them the same.
// Both read alike after a reopen, DB.Check finds nothing, and an old mark
// reports the fingerprint a new one would, read-only and after the upgrade.
func TestVersion2BucketsBesideHeaderedOnes(t *testing.T) {
	ctx := context.Background()
	clock := oncetest.NewClock(newestFilterEpoch)
	path := filepath.Join(t.TempDir(), "v2.db")
	opts := timeOpts(clock, time.Hour, 24*time.Hour)
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	applyKey(t, db, "done")
	require.NoError(t, db.Close())
	require.Equal(t, 1, rewriteAsVersion2(t, path))
	values := map[string][]byte{
		"empty": {},
		"gone":  fencestore.AppendGone(nil, fencestore.Record{Fence: 9, Version: 2}),
		"live":  fencestore.AppendLive(nil, fencestore.Record{Fence: 7, Version: 3}, []byte("x")),
		"plain": fencestore.AppendPlain(nil, []byte("p")),
		"tag":   {0x5a},
	}
	updateBolt(t, path, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("u/old"))
		if err != nil {
			return err
		}
		return putAll(b.Put, values)
	})
	sum := sha256.Sum256([]byte("done"))
	var want [sha256.Size]byte
	copy(want[:16], sum[:16])
	ro := *opts
	ro.ReadOnly = true
	db, err = oncekv.Open(path, &ro)
	require.NoError(t, err)
	info, err := db.Mark("h", "done")
	require.NoError(t, err)
	require.Equal(t, want, info.Fingerprint, "a format 2 mark, read-only")
	require.NoError(t, db.Close())

	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	info, err = db.Mark("h", "done")
	require.NoError(t, err)
	require.Equal(t, want, info.Fingerprint, "a format 2 mark, upgraded file")
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("new"))
		if err != nil {
			return err
		}
		return putAll(b.Put, values)
	}))
	read := func(db *oncekv.DB) {
		t.Helper()
		require.NoError(t, db.View(func(tx *oncekv.Tx) error {
			for _, name := range []string{"old", "new"} {
				b := tx.Bucket([]byte(name))
				require.NotNil(t, b, name)
				seen := map[string][]byte{}
				require.NoError(t, b.ForEach(func(k, v []byte) error {
					seen[string(k)] = bytes.Clone(v)
					return nil
				}))
				require.Equal(t, values, seen, name)
				var back []string
				c := b.Cursor()
				for k, v := c.Last(); k != nil; k, v = c.Prev() {
					require.Equal(t, values[string(k)], v, "%s %s", name, k)
					back = append(back, string(k))
				}
				require.Equal(t, []string{"tag", "plain", "live", "gone", "empty"}, back, name)
				for k, v := range values {
					require.Equal(t, v, b.Get([]byte(k)), "%s %s", name, k)
					require.Zero(t, b.Fence([]byte(k)), "%s %s", name, k)
					require.Zero(t, b.Version([]byte(k)), "%s %s", name, k)
				}
			}
			return nil
		}))
	}
	read(db)
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		for _, name := range []string{"old", "new"} {
			b := tx.Bucket([]byte(name))
			require.NoError(t, b.PutFenced([]byte("live"), values["live"], 1), name)
			require.ErrorIs(t, b.PutFenced([]byte("live"), values["live"], 1), oncekv.ErrFenced, name)
		}
		return nil
	}))
	require.NoError(t, db.Close())
	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	defer db.Close()
	read2 := func() {
		require.NoError(t, db.View(func(tx *oncekv.Tx) error {
			for _, name := range []string{"old", "new"} {
				b := tx.Bucket([]byte(name))
				require.Equal(t, uint64(1), b.Fence([]byte("live")), name)
				require.Equal(t, values["live"], b.Get([]byte("live")), name)
			}
			return nil
		}))
	}
	read2()
	require.NoError(t, db.Check(func(p error) error { return p }))
	res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "done", Payload: []byte("done")}, mustNotRunApply(t))
	require.NoError(t, err)
	require.True(t, res.Duplicate)
}

// TestLoadMarksAcrossWindowsKeepsSealedFilters: LoadMarks writes, in one
// transaction, marks of the newest window and then of a newer one, which
// seals the newest window and persists its filter. That filter must hold
// the marks the same call wrote into the window just before: after a
// reopen, which loads it instead of reading the window's keys, each of
// them is still a duplicate (the filters are in charge, no hook). Marks
// given out of order (an older window's after a newer one's) must not
// slip into a window whose filter was already persisted either.
func TestLoadMarksAcrossWindowsKeepsSealedFilters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order []int // the window of each mark, in hours after the first
	}{
		{"oldest first", []int{0, 0, 1, 1, 2}},
		{"out of order", []int{0, 1, 0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clock := oncetest.NewClock(newestFilterEpoch)
			path := filepath.Join(t.TempDir(), "x.db")
			opts := newestFilterOpts(clock)
			db, err := oncekv.Open(path, opts)
			require.NoError(t, err)
			applyKey(t, db, "first") // the newest window: the first hour's
			var marks []oncekv.MarkInfo
			first := newestFilterEpoch.Truncate(time.Hour)
			for i, h := range tc.order {
				key := fmt.Sprint("loaded-", i)
				sum := sha256.Sum256([]byte(key))
				marks = append(marks, oncekv.MarkInfo{Handler: "h", Key: key, State: oncekv.MarkDone,
					Fingerprint: sum, Response: []byte(key), FirstSeen: first.Add(time.Duration(h)*time.Hour + time.Minute)})
			}
			clock.Advance(3 * time.Hour)
			n, err := db.LoadMarks(marks)
			require.NoError(t, err)
			require.Equal(t, len(marks), n)
			require.NoError(t, db.Close())

			for range 2 { // the reopen loads the sealed filters; the next one too
				db, err = oncekv.Open(path, opts)
				require.NoError(t, err)
				for _, m := range marks {
					res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: m.Key, Payload: []byte(m.Key)}, mustNotRunApply(t))
					require.NoError(t, err, m.Key)
					require.True(t, res.Duplicate, "%s: loaded, then run as new after a reopen", m.Key)
				}
				require.NoError(t, db.Close())
			}
		})
	}
}

// putAll puts every key of values with put.
func putAll(put func(k, v []byte) error, values map[string][]byte) error {
	for k, v := range values {
		if err := put([]byte(k), v); err != nil {
			return err
		}
	}
	return nil
}

// TestDamagedHeaderEveryOperation: a key whose fence header is damaged on
// disk, in every way a header can be (an unknown kind, cut short, a
// checksum that fails, a tombstone with bytes after it, empty), panics
// nothing: reads see no value, and every write of the key, and the
// deletion of its bucket (which must carry its fence on), is refused with
// ErrCorrupt naming the bucket and the key, changing nothing. The other
// keys stay readable and writable.
func TestDamagedHeaderEveryOperation(t *testing.T) {
	damages := map[string]func(rec []byte) []byte{
		"unknown kind": func(rec []byte) []byte { rec[0] = 0x77; return rec },
		"cut short":    func(rec []byte) []byte { return rec[:9] },
		"checksum":     func(rec []byte) []byte { rec[3] ^= 0x01; return rec },
		"tombstone tail": func(rec []byte) []byte {
			return append(fencestore.AppendGone(nil, fencestore.Record{Fence: 5, Version: 1}), 'x')
		},
		"empty":             func([]byte) []byte { return []byte{} },
		"kind of tombstone": func(rec []byte) []byte { rec[0] = 0xa5; return rec },
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			db := oncetest.Open(t, &oncekv.Options{NoSync: true})
			require.NoError(t, putFenced(db, "a", []byte("1"), 5))
			require.NoError(t, putFenced(db, "b", []byte("2"), 5))
			path := db.Path()
			require.NoError(t, db.Close())
			updateBolt(t, path, func(tx *bolt.Tx) error {
				ub := tx.Bucket(append([]byte("u/"), registers...))
				return ub.Put([]byte("a"), damage(bytes.Clone(ub.Get([]byte("a")))))
			})
			db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
			require.NoError(t, err)
			defer db.Close()
			corrupt := func(err error) {
				t.Helper()
				require.ErrorIs(t, err, oncekv.ErrCorrupt)
				var re *oncekv.RecordError
				require.ErrorAs(t, err, &re)
				require.Equal(t, "u/registers", re.Bucket)
				require.Equal(t, "a", re.Key)
			}
			require.NoError(t, db.View(func(tx *oncekv.Tx) error {
				b := tx.Bucket(registers)
				require.Nil(t, b.Get([]byte("a")))
				require.Zero(t, b.Fence([]byte("a")))
				require.Zero(t, b.Version([]byte("a")))
				corrupt(b.ForEach(func(k, v []byte) error { return nil }))
				var keys []string
				c := b.Cursor()
				for k, _ := c.First(); k != nil; k, _ = c.Next() {
					keys = append(keys, string(k))
				}
				for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
					keys = append(keys, string(k))
				}
				k, _ := c.Seek([]byte("a"))
				keys = append(keys, string(k))
				require.Equal(t, []string{"b", "b", "b"}, keys)
				return nil
			}))
			writes := map[string]func(b *oncekv.Bucket) error{
				"Put":          func(b *oncekv.Bucket) error { return b.Put([]byte("a"), []byte("x")) },
				"PutFenced":    func(b *oncekv.Bucket) error { return b.PutFenced([]byte("a"), []byte("x"), 99) },
				"PutIfVersion": func(b *oncekv.Bucket) error { return b.PutIfVersion([]byte("a"), []byte("x"), 0) },
				"Delete":       func(b *oncekv.Bucket) error { return b.Delete([]byte("a")) },
			}
			for op, write := range writes {
				corrupt(update(t, db, write))
				require.NoError(t, db.View(func(tx *oncekv.Tx) error {
					require.Nil(t, tx.Bucket(registers).Get([]byte("a")), op)
					return nil
				}))
			}
			corrupt(db.Update(func(tx *oncekv.Tx) error { return tx.DeleteBucket(registers) }))
			require.NoError(t, update(t, db, func(b *oncekv.Bucket) error {
				require.ErrorIs(t, b.PutFenced([]byte("b"), []byte("3"), 5), oncekv.ErrFenced)
				return b.PutFenced([]byte("b"), []byte("3"), 6)
			}))
			var problems []error
			require.NoError(t, db.Check(func(p error) error { problems = append(problems, p); return nil }))
			require.Len(t, problems, 1)
			corrupt(problems[0])
		})
	}
}
