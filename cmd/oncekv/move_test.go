package main_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/queue"
)

// TestDumpLoadCarriesEveryCounter moves a store with a queue, claims,
// fenced and versioned keys and a bucket sequence through dump and load,
// and checks that the moved store goes on from the numbers the far side
// has seen: a queue delivery's token, a claim's token, a NextFence token
// and a NextSequence number are each greater than any issued before the
// move; a stale fenced writer stays refused (a deleted key too), and a
// compare-and-set with the version read before the move still succeeds
// once.
func TestDumpLoadCarriesEveryCounter(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "src.db")
	c := &fakeClock{now: t0}
	db := openStore(t, path, c)
	ctx := context.Background()
	q, err := queue.Open(db, "outbox", nil)
	require.NoError(t, err)
	for _, k := range []string{"edit-1", "edit-2"} {
		_, err := q.Enqueue(ctx, queue.Message{Key: k, Body: []byte(k), OrderingKey: "note-1"})
		require.NoError(t, err)
	}
	var lastDelivery uint64
	for range 3 { // three deliveries of edit-1: tokens 1, 2, 3
		m, err := q.Receive(ctx)
		require.NoError(t, err)
		lastDelivery = m.Token
		require.NoError(t, q.Nack(ctx, m, nil))
		c.now = c.now.Add(time.Hour) // past any backoff
	}
	require.NoError(t, q.Close())
	var lastFence uint64
	for range 5 {
		lastFence, err = db.NextFence("orders")
		require.NoError(t, err)
	}
	done, err := db.Claim(ctx, oncekv.Request{Handler: "charge", Key: "c-1"}, time.Minute)
	require.NoError(t, err)
	_, err = done.Complete(ctx, []byte("ok"), nil)
	require.NoError(t, err)
	running, err := db.Claim(ctx, oncekv.Request{Handler: "charge", Key: "c-2"}, 10*time.Minute)
	require.NoError(t, err)
	var seq, version uint64
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("acct"))
		require.NoError(t, err)
		require.NoError(t, b.PutFenced([]byte("alice"), []byte("10"), lastFence))
		require.NoError(t, b.Put([]byte("alice"), []byte("11")))
		version = b.Version([]byte("alice"))
		require.NoError(t, b.PutFenced([]byte("bob"), []byte("1"), 3))
		require.NoError(t, b.Delete([]byte("bob")))
		for range 3 {
			seq, err = b.NextSequence()
			require.NoError(t, err)
		}
		return nil
	}))
	require.NoError(t, db.Close())

	dump := cli(t, "dump", path)
	require.Equal(t, 0, dump.code, dump.stderr)
	file := filepath.Join(dir, "dump.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(dump.stdout), 0o600))
	moved := filepath.Join(dir, "moved.db")
	r := cli(t, "load", moved, file, "-now", c.now.Format(time.RFC3339Nano))
	require.Equal(t, 0, r.code, r.stderr)

	db = openStore(t, moved, c)
	defer func() { require.NoError(t, db.Close()) }()
	q, err = queue.Open(db, "outbox", nil)
	require.NoError(t, err)
	defer q.Close()
	m, err := q.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, "edit-1", m.Key)
	require.Greater(t, m.Token, lastDelivery, "a delivery token the far side saw before the move")
	require.Equal(t, 4, m.Attempt)

	cl, err := db.Claim(ctx, oncekv.Request{Handler: "charge", Key: "c-2"}, time.Minute)
	require.NoError(t, err)
	require.Greater(t, cl.Token(), running.Token(), "a claim token issued before the move")
	n, err := db.NextFence("orders")
	require.NoError(t, err)
	require.Equal(t, lastFence+1, n)
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		b := tx.Bucket([]byte("acct"))
		require.Equal(t, []byte("11"), b.Get([]byte("alice")))
		require.ErrorIs(t, b.PutFenced([]byte("alice"), []byte("stale"), lastFence), oncekv.ErrFenced)
		require.ErrorIs(t, b.PutFenced([]byte("bob"), []byte("back"), 3), oncekv.ErrFenced)
		require.NoError(t, b.PutIfVersion([]byte("alice"), []byte("12"), version))
		next, err := b.NextSequence()
		require.NoError(t, err)
		require.Equal(t, seq+1, next)
		return nil
	}))
}
