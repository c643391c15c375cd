package oncekv_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

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
