package oncekv_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

func TestTokenCountersListAndRaise(t *testing.T) {
	db := oncetest.Open(t, nil)
	ctx := context.Background()
	for range 3 {
		_, err := db.NextFence("orders")
		require.NoError(t, err)
	}
	_, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "k"}, 1<<40)
	require.NoError(t, err)
	got := map[string]uint64{}
	require.NoError(t, db.TokenCounters(func(c oncekv.TokenCounter) error {
		got[c.Resource] = c.Last
		return nil
	}))
	require.Equal(t, map[string]uint64{"orders": 3, "": 1}, got)

	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		require.NoError(t, tx.RaiseTokenCounter(oncekv.TokenCounter{Resource: "orders", Last: 100}))
		require.NoError(t, tx.RaiseTokenCounter(oncekv.TokenCounter{Resource: "new", Last: 7}))
		require.NoError(t, tx.RaiseTokenCounter(oncekv.TokenCounter{Last: 50}))
		return nil
	}))
	n, err := db.NextFence("orders")
	require.NoError(t, err)
	require.Equal(t, uint64(101), n)
	n, err = db.NextFence("new")
	require.NoError(t, err)
	require.Equal(t, uint64(8), n)
	c, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "k2"}, 1<<40)
	require.NoError(t, err)
	require.Equal(t, uint64(51), c.Token())

	// Never lowered.
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		return tx.RaiseTokenCounter(oncekv.TokenCounter{Resource: "orders", Last: 5})
	}))
	n, err = db.NextFence("orders")
	require.NoError(t, err)
	require.Equal(t, uint64(102), n)

	err = db.View(func(tx *oncekv.Tx) error { return tx.RaiseTokenCounter(oncekv.TokenCounter{Resource: "x", Last: 1}) })
	require.ErrorIs(t, err, oncekv.ErrTxNotWritable)
}

// TestKeyFencesCarryToAnotherStore lists the fences and versions of a
// store's keys (live, deleted, of a deleted bucket) and raises them in a
// new store:
// the stale writer is refused there as it was here, a compare-and-set
// with the version read before the move succeeds once, and a recreated
// bucket goes on with its keys' fences.
func TestKeyFencesCarryToAnotherStore(t *testing.T) {
	src := oncetest.Open(t, nil)
	require.NoError(t, src.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("acct"))
		require.NoError(t, err)
		require.NoError(t, b.PutFenced([]byte("alice"), []byte("10"), 40))
		require.NoError(t, b.Put([]byte("alice"), []byte("11"))) // version 2
		require.NoError(t, b.PutFenced([]byte("bob"), []byte("1"), 9))
		require.NoError(t, b.Delete([]byte("bob")))
		require.NoError(t, b.Put([]byte("carol"), []byte("plain")))
		gone, err := tx.CreateBucketIfNotExists([]byte("gone"))
		require.NoError(t, err)
		require.NoError(t, gone.PutFenced([]byte("k"), []byte("v"), 77))
		return tx.DeleteBucket([]byte("gone"))
	}))
	var all []oncekv.KeyFence
	require.NoError(t, src.KeyFences(func(f oncekv.KeyFence) error { all = append(all, f); return nil }))
	byKey := map[string]oncekv.KeyFence{}
	for _, f := range all {
		byKey[string(f.Bucket)+"/"+string(f.Key)] = f
	}
	require.Len(t, byKey, 3, "%+v", all)
	require.Equal(t, oncekv.KeyFence{Bucket: []byte("acct"), Key: []byte("alice"), Fence: 40, Version: 2}, byKey["acct/alice"])
	require.Equal(t, oncekv.KeyFence{Bucket: []byte("acct"), Key: []byte("bob"), Fence: 9, Version: 2, Deleted: true}, byKey["acct/bob"])
	require.Equal(t, oncekv.KeyFence{Bucket: []byte("gone"), Key: []byte("k"), Fence: 77, Version: 1, Deleted: true}, byKey["gone/k"])

	dst, err := oncekv.Open(filepath.Join(t.TempDir(), "dst.db"), &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	defer dst.Close()
	require.NoError(t, dst.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("acct"))
		require.NoError(t, err)
		require.NoError(t, b.Put([]byte("alice"), []byte("11")))
		require.NoError(t, b.Put([]byte("carol"), []byte("plain")))
		for _, f := range all {
			require.NoError(t, tx.RaiseKeyFence(f))
		}
		return nil
	}))
	require.NoError(t, dst.Update(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte("acct"))
		require.Equal(t, []byte("11"), b.Get([]byte("alice")), "the value is kept")
		require.Nil(t, b.Get([]byte("bob")))
		require.Equal(t, uint64(40), b.Fence([]byte("alice")))
		require.Equal(t, uint64(2), b.Version([]byte("alice")))
		require.ErrorIs(t, b.PutFenced([]byte("alice"), []byte("stale"), 40), oncekv.ErrFenced)
		require.ErrorIs(t, b.PutFenced([]byte("bob"), []byte("back"), 9), oncekv.ErrFenced, "a deleted key stays fenced")
		require.NoError(t, b.PutIfVersion([]byte("alice"), []byte("12"), 2))
		require.ErrorIs(t, b.PutIfVersion([]byte("alice"), []byte("13"), 2), oncekv.ErrVersionConflict)
		gone, err := tx.CreateBucketIfNotExists([]byte("gone"))
		require.NoError(t, err)
		require.ErrorIs(t, gone.PutFenced([]byte("k"), []byte("v"), 77), oncekv.ErrFenced, "a recreated bucket keeps its keys' fences")
		return nil
	}))
	// Never lowered.
	require.NoError(t, dst.Update(func(tx *oncekv.Tx) error {
		return tx.RaiseKeyFence(oncekv.KeyFence{Bucket: []byte("acct"), Key: []byte("alice"), Fence: 1, Version: 1})
	}))
	require.NoError(t, dst.View(func(tx *oncekv.Tx) error {
		require.Equal(t, uint64(40), tx.Bucket([]byte("acct")).Fence([]byte("alice")))
		require.Equal(t, uint64(3), tx.Bucket([]byte("acct")).Version([]byte("alice")))
		return nil
	}))
	err = dst.View(func(tx *oncekv.Tx) error {
		return tx.RaiseKeyFence(oncekv.KeyFence{Bucket: []byte("acct"), Key: []byte("x"), Fence: 1})
	})
	require.ErrorIs(t, err, oncekv.ErrTxNotWritable)
	require.NoError(t, dst.Update(func(tx *oncekv.Tx) error {
		require.ErrorIs(t, tx.RaiseKeyFence(oncekv.KeyFence{Bucket: []byte("acct"), Fence: 1}), oncekv.ErrKeyRequired)
		require.ErrorIs(t, tx.RaiseKeyFence(oncekv.KeyFence{Key: []byte("k"), Fence: 1}), oncekv.ErrBucketNameRequired)
		return nil
	}))
}

func TestBucketSequenceRaise(t *testing.T) {
	db := oncetest.Open(t, nil)
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("ids"))
		require.NoError(t, err)
		require.Zero(t, b.Sequence())
		require.NoError(t, b.PutFenced([]byte("k"), []byte("v"), 1)) // the bucket's header bits stay set
		require.NoError(t, b.RaiseSequence(41))
		require.Equal(t, uint64(41), b.Sequence())
		require.NoError(t, b.RaiseSequence(3)) // never lowered
		n, err := b.NextSequence()
		require.NoError(t, err)
		require.Equal(t, uint64(42), n)
		require.ErrorIs(t, b.RaiseSequence(1<<62), oncekv.ErrExhausted)
		require.ErrorIs(t, b.PutFenced([]byte("k"), []byte("v"), 1), oncekv.ErrFenced, "fences still read")
		return nil
	}))
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte("ids"))
		require.Equal(t, uint64(42), b.Sequence())
		require.ErrorIs(t, b.RaiseSequence(50), oncekv.ErrTxNotWritable)
		return nil
	}))
}
