package oncekv_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/fencestore"
	"github.com/oncekv/oncekv/internal/oncetest"
)

func TestOnCommitRunsOnceAfterCommitNeverOnRollback(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	var ran []string
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		tx.OnCommit(func() { ran = append(ran, "a") })
		tx.OnCommit(nil) // ignored
		tx.OnCommit(func() {
			// After the write lock: the hook may write.
			require.NoError(t, db.Update(func(tx *oncekv.Tx) error { return nil }))
			ran = append(ran, "b")
		})
		require.Empty(t, ran, "nothing runs before the commit")
		return nil
	}))
	require.Equal(t, []string{"a", "b"}, ran, "once each, in order")

	ran = nil
	boom := errors.New("boom")
	require.ErrorIs(t, db.Update(func(tx *oncekv.Tx) error {
		tx.OnCommit(func() { ran = append(ran, "rolled back") })
		return boom
	}), boom)
	require.Panics(t, func() {
		_ = db.Update(func(tx *oncekv.Tx) error {
			tx.OnCommit(func() { ran = append(ran, "panicked") })
			panic("effect")
		})
	})
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		tx.OnCommit(func() { ran = append(ran, "read-only") })
		return nil
	}))
	require.Empty(t, ran)

	// A hook's panic is the caller's, after the commit.
	require.PanicsWithValue(t, "hook", func() {
		_ = db.Update(func(tx *oncekv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			require.NoError(t, err)
			require.NoError(t, b.Put([]byte("k"), []byte("v")))
			tx.OnCommit(func() { panic("hook") })
			return nil
		})
	})
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		require.Equal(t, []byte("v"), tx.Bucket([]byte("b")).Get([]byte("k")))
		return nil
	}))
}

func TestOnCommitInApplyRunsInCallerOnlyForCommittedAttempt(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	const n = 16
	var mu sync.Mutex
	hooks := map[string]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := string(rune('a' + i))
			ran := false
			_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: key}, func(tx *oncekv.Tx) ([]byte, error) {
				tx.OnCommit(func() {
					ran = true // the caller's own goroutine: no lock needed
					mu.Lock()
					hooks[key]++
					mu.Unlock()
				})
				if i%4 == 0 {
					// Fails: the group rolls back and runs the others again.
					return nil, errors.New("transient")
				}
				return nil, nil
			})
			require.Equal(t, i%4 != 0, err == nil)
			require.Equal(t, err == nil, ran, "the hook ran before Apply returned, iff it applied")
		}()
	}
	wg.Wait()
	for i := range n {
		want := 1
		if i%4 == 0 {
			want = 0
		}
		require.Equal(t, want, hooks[string(rune('a'+i))], "key %d", i)
	}
	// A duplicate runs no effect and so no hook.
	res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "b"}, func(tx *oncekv.Tx) ([]byte, error) {
		tx.OnCommit(func() { t.Fatal("duplicate ran a hook") })
		return nil, nil
	})
	require.NoError(t, err)
	require.True(t, res.Duplicate)

	// ApplyBatch: each request's hooks, for the applied ones only.
	var got []int
	_, err = db.ApplyBatch(ctx, []oncekv.Request{{Handler: "h", Key: "x"}, {Handler: "h", Key: "b"}, {Handler: "h", Key: "y"}},
		func(tx *oncekv.Tx, i int) ([]byte, error) {
			tx.OnCommit(func() { got = append(got, i) })
			if i == 2 {
				return nil, oncekv.Permanent(errors.New("bad"))
			}
			return nil, nil
		})
	require.NoError(t, err)
	require.Equal(t, []int{0}, got)
}

func TestOnCommitInClaimComplete(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	c, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "k"}, time.Minute)
	require.NoError(t, err)
	ran := 0
	_, err = c.Complete(ctx, []byte("ok"), func(tx *oncekv.Tx) error {
		tx.OnCommit(func() { ran++ })
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 1, ran)
}

func TestTxNowIsTheStoreClock(t *testing.T) {
	clock := oncetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, Now: clock.Now})
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		require.True(t, clock.Now().Equal(tx.Now()))
		return nil
	}))
	clock.Advance(-time.Hour) // a step back is not seen
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		require.True(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Equal(tx.Now()))
		return nil
	}))
}

func TestUserBucketsCannotReachSystemBuckets(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "k"}, func(*oncekv.Tx) ([]byte, error) { return []byte("r"), nil })
	require.NoError(t, err)

	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		for _, name := range []string{"oncekv.meta", "oncekv.fences", "u/", "u/u/"} {
			require.Nil(t, tx.Bucket([]byte(name)), name)
		}
		// A user bucket may carry a system name; it is still a user bucket.
		for _, name := range []string{"oncekv.meta", "oncekv.fences", "oncekv.window/"} {
			b, err := tx.CreateBucketIfNotExists([]byte(name))
			require.NoError(t, err)
			require.NoError(t, b.Put([]byte("k"), []byte("clobber?")))
			require.NoError(t, tx.DeleteBucket([]byte(name)))
		}
		var names []string
		require.NoError(t, tx.ForEachBucket(func(name []byte) error {
			names = append(names, string(name))
			return nil
		}))
		require.Empty(t, names)
		return nil
	}))
	res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "k"}, nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate, "user calls must not have touched the marks")
	require.Equal(t, "r", string(res.Response))
}

func TestUserBucketOperations(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	var leaked *oncekv.Bucket
	var leakedTx *oncekv.Tx
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		require.True(t, tx.Writable())
		_, err := tx.CreateBucketIfNotExists(nil)
		require.ErrorIs(t, err, oncekv.ErrBucketNameRequired)
		b, err := tx.CreateBucketIfNotExists([]byte("kv"))
		require.NoError(t, err)
		require.Equal(t, "kv", string(b.Name()))

		key, val := []byte("b"), []byte("2")
		require.NoError(t, b.Put(key, val))
		key[0], val[0] = 'X', 'X' // caller-owned slices may be reused at once
		require.Equal(t, "2", string(b.Get([]byte("b"))))
		require.Nil(t, b.Get([]byte("X")))
		require.NoError(t, b.Put([]byte("a"), []byte("1")))
		require.NoError(t, b.Put([]byte("c"), nil))
		require.NotNil(t, b.Get([]byte("c")), "a key with an empty value exists")

		require.ErrorIs(t, b.Put(nil, []byte("v")), oncekv.ErrKeyRequired)
		require.ErrorIs(t, b.Put(make([]byte, 32769), []byte("v")), oncekv.ErrKeyTooLarge)
		require.NoError(t, b.Put(make([]byte, 32768), []byte("max")))
		require.NoError(t, b.Delete(make([]byte, 32768)))
		require.NoError(t, b.Delete([]byte("absent")))

		var seen []string
		require.NoError(t, b.ForEach(func(k, v []byte) error {
			seen = append(seen, string(k)+"="+string(v))
			return nil
		}))
		require.Equal(t, []string{"a=1", "b=2", "c="}, seen)

		c := b.Cursor()
		k, _ := c.Last()
		require.Equal(t, "c", string(k))
		k, _ = c.Prev()
		require.Equal(t, "b", string(k))
		k, _ = c.Seek([]byte("bb"))
		require.Equal(t, "c", string(k))
		require.NoError(t, c.Delete())
		k, _ = c.First()
		require.Equal(t, "a", string(k))
		k, _ = c.Next()
		require.Equal(t, "b", string(k))
		k, _ = c.Next()
		require.Nil(t, k)

		seq, err := b.NextSequence()
		require.NoError(t, err)
		require.Equal(t, uint64(1), seq)
		leaked, leakedTx = b, tx
		return nil
	}))

	// Everything obtained from a transaction is dead once it ends.
	require.Nil(t, leaked.Get([]byte("a")))
	require.ErrorIs(t, leaked.Put([]byte("a"), []byte("v")), oncekv.ErrTxClosed)
	require.ErrorIs(t, leaked.ForEach(func(k, v []byte) error { return nil }), oncekv.ErrTxClosed)
	k, _ := leaked.Cursor().First()
	require.Nil(t, k)
	require.Nil(t, leakedTx.Bucket([]byte("kv")))
	_, err := leakedTx.CreateBucketIfNotExists([]byte("late"))
	require.ErrorIs(t, err, oncekv.ErrTxClosed)

	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		require.False(t, tx.Writable())
		b := tx.Bucket([]byte("kv"))
		require.NotNil(t, b)
		require.Equal(t, "1", string(b.Get([]byte("a"))))
		require.ErrorIs(t, b.Put([]byte("a"), []byte("v")), oncekv.ErrTxNotWritable)
		require.ErrorIs(t, b.Delete([]byte("a")), oncekv.ErrTxNotWritable)
		_, err := tx.CreateBucketIfNotExists([]byte("new"))
		require.ErrorIs(t, err, oncekv.ErrTxNotWritable)
		require.Nil(t, tx.Bucket([]byte("missing")))
		return nil
	}))

	errStop := errors.New("stop")
	require.ErrorIs(t, db.Update(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte("kv"))
		require.NoError(t, b.Put([]byte("a"), []byte("rolled back")))
		return errStop
	}), errStop)
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		require.Equal(t, "1", string(tx.Bucket([]byte("kv")).Get([]byte("a"))))
		return nil
	}))
}

// scan is what a reader of the registers bucket sees, by every way of
// reading it: ForEach, a cursor forwards and backwards, and Seek.
type scan struct {
	forEach, forward, backward []string
	seek                       string // the key Seek("a") lands on
}

func scanRegisters(t *testing.T, db *oncekv.DB) scan {
	t.Helper()
	var s scan
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket(registers)
		require.NoError(t, b.ForEach(func(k, v []byte) error {
			s.forEach = append(s.forEach, string(k)+"="+string(v))
			return nil
		}))
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			s.forward = append(s.forward, string(k)+"="+string(v))
		}
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			s.backward = append([]string{string(k) + "=" + string(v)}, s.backward...)
		}
		k, _ := c.Seek([]byte("a"))
		s.seek = string(k)
		return nil
	}))
	return s
}

// TestDeletedFencedKeysStayHidden: a deleted key that keeps its fence is
// invisible to every read, in both layouts, after a reopen too; values
// read back without anything the store keeps with them; Cursor.Delete in
// a loop deletes every key, fenced or not.
func TestDeletedFencedKeysStayHidden(t *testing.T) {
	forLayouts(t, func(t *testing.T, db *oncekv.DB) {
		require.NoError(t, update(t, db, func(b *oncekv.Bucket) error {
			for _, k := range []string{"a", "c", "e"} {
				if err := b.PutFenced([]byte(k), []byte("f"+k), 3); err != nil {
					return err
				}
			}
			for _, k := range []string{"b", "d"} {
				if err := b.Put([]byte(k), []byte("p"+k)); err != nil {
					return err
				}
			}
			if err := b.Put([]byte("empty"), nil); err != nil {
				return err
			}
			require.NotNil(t, b.Get([]byte("empty")), "an empty value exists")
			require.Empty(t, b.Get([]byte("empty")))
			for _, k := range []string{"a", "d", "e"} {
				if err := b.Delete([]byte(k)); err != nil {
					return err
				}
			}
			return nil
		}))
		want := []string{"b=pb", "c=fc", "empty="}
		require.Equal(t, scan{forEach: want, forward: want, backward: want, seek: "b"}, scanRegisters(t, db))
		require.Equal(t, register{fence: 3, version: 2}, readRegister(t, db, "a"))
		require.Equal(t, register{fence: 3, version: 2}, readRegister(t, db, "e"))
		require.Equal(t, register{}, readRegister(t, db, "d"))

		// Cursor.Delete of every key: the fenced ones keep their fence.
		require.NoError(t, update(t, db, func(b *oncekv.Bucket) error {
			c := b.Cursor()
			n := 0
			for k, _ := c.First(); k != nil; k, _ = c.First() {
				if err := c.Delete(); err != nil {
					return err
				}
				n++
			}
			require.Equal(t, 3, n)
			return nil
		}))
		require.Equal(t, scan{}, scanRegisters(t, db))
		require.Equal(t, register{fence: 3, version: 2}, readRegister(t, db, "c"))
		require.ErrorIs(t, putFenced(db, "c", []byte("stale"), 3), oncekv.ErrFenced)
		require.NoError(t, putFenced(db, "c", []byte("back"), 4))
		require.Equal(t, register{value: "back", exists: true, fence: 4, version: 3}, readRegister(t, db, "c"))
		require.Equal(t, []string{"c=back"}, scanRegisters(t, db).forward)
	})
}

// TestCursorDeleteWhileIterating: deleting each key under a cursor moving
// forwards visits and deletes every key, fenced ones included. (Buckets
// of the older layout keep bbolt's own cursor, which after a Delete may
// skip the next key once the transaction has written to the bucket.)
func TestCursorDeleteWhileIterating(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	{
		keys := []string{"a", "b", "c", "d", "e", "f"}
		require.NoError(t, update(t, db, func(b *oncekv.Bucket) error {
			for i, k := range keys {
				put := b.Put([]byte(k), []byte(k))
				if i%2 == 0 {
					put = b.PutFenced([]byte(k), []byte(k), 1)
				}
				if put != nil {
					return put
				}
			}
			return nil
		}))
		var seen []string
		require.NoError(t, update(t, db, func(b *oncekv.Bucket) error {
			c := b.Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				seen = append(seen, string(k))
				if err := c.Delete(); err != nil {
					return err
				}
			}
			return nil
		}))
		require.Equal(t, keys, seen, "every key visited once")
		require.Equal(t, scan{}, scanRegisters(t, db), "and deleted")
		require.Equal(t, register{fence: 1, version: 2}, readRegister(t, db, "c"), "the fenced ones keep their fence")
	}
}

// TestFenceHeadersSurviveReopen: fences, versions and tombstones kept in
// headers are read back after the store is closed and opened again, and
// NextSequence goes on counting from where it was.
func TestFenceHeadersSurviveReopen(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	path := db.Path()
	var seq uint64
	require.NoError(t, update(t, db, func(b *oncekv.Bucket) error {
		for range 3 {
			n, err := b.NextSequence()
			require.NoError(t, err)
			require.Equal(t, seq+1, n, "1, 2, 3: the bits that say where fences are stay out of it")
			seq = n
		}
		if err := b.PutFenced([]byte("k"), []byte("v"), 9); err != nil {
			return err
		}
		if err := b.PutFenced([]byte("gone"), []byte("v"), 4); err != nil {
			return err
		}
		return b.Delete([]byte("gone"))
	}))
	require.NoError(t, db.Close())

	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	require.Equal(t, register{value: "v", exists: true, fence: 9, version: 1}, readRegister(t, db, "k"))
	require.Equal(t, register{fence: 4, version: 2}, readRegister(t, db, "gone"))
	require.ErrorIs(t, putFenced(db, "gone", []byte("zombie"), 4), oncekv.ErrFenced)
	require.NoError(t, update(t, db, func(b *oncekv.Bucket) error {
		n, err := b.NextSequence()
		require.NoError(t, err)
		require.Equal(t, seq+1, n)
		return nil
	}))
}

// TestDamagedFenceHeaderStopsForEach: ForEach over a bucket whose header
// of a key is damaged reports ErrCorrupt naming the key, never a value with
// a piece of header in it; a cursor passes over the key; DB.Check reports
// it.
func TestDamagedFenceHeaderStopsForEach(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	require.NoError(t, putFenced(db, "a", []byte("1"), 1))
	require.NoError(t, putFenced(db, "b", []byte("2"), 1))
	path := db.Path()
	require.NoError(t, db.Close())
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		ub := tx.Bucket(append([]byte("u/"), registers...))
		rec := append([]byte(nil), ub.Get([]byte("a"))...)
		rec[0] = 0x5b // a kind of header that does not exist
		return ub.Put([]byte("a"), rec)
	}))
	require.NoError(t, b.Close())
	db, err = oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		bk := tx.Bucket(registers)
		err := bk.ForEach(func(k, v []byte) error { return nil })
		require.ErrorIs(t, err, oncekv.ErrCorrupt)
		var re *oncekv.RecordError
		require.ErrorAs(t, err, &re)
		require.Equal(t, "a", re.Key)
		k, v := bk.Cursor().First()
		require.Equal(t, "b", string(k))
		require.Equal(t, "2", string(v))
		require.Nil(t, bk.Get([]byte("a")))
		return nil
	}))
	var problems []error
	require.NoError(t, db.Check(func(p error) error { problems = append(problems, p); return nil }))
	require.Len(t, problems, 1, "the store check decodes fence headers too")
	var re *oncekv.RecordError
	require.ErrorAs(t, problems[0], &re)
	require.Equal(t, "u/registers", re.Bucket)
	require.Equal(t, "a", re.Key)
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
