package oncekv_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// uncachedResponse is too large for the duplicate cache, so that every
// duplicate of a key answered with it reads its mark in a snapshot.
var uncachedResponse = bytes.Repeat([]byte("u"), 300)

// applyUncached applies handler/key with an effect returning
// uncachedResponse and extra bytes written to a user bucket.
func applyUncached(db *oncekv.DB, key string, extra []byte) (oncekv.Result, error) {
	return db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: key, Payload: []byte(key)},
		func(tx *oncekv.Tx) ([]byte, error) {
			if len(extra) > 0 {
				b, err := tx.CreateBucketIfNotExists([]byte("big"))
				if err != nil {
					return nil, err
				}
				if err := b.Put([]byte(key), extra); err != nil {
					return nil, err
				}
			}
			return uncachedResponse, nil
		})
}

// checkDuplicate fails unless key comes back as a duplicate with
// uncachedResponse; it may run on any goroutine.
func checkDuplicate(t *testing.T, db *oncekv.DB, key string) bool {
	res, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: key, Payload: []byte(key)},
		func(*oncekv.Tx) ([]byte, error) { return nil, fmt.Errorf("effect of %s ran again", key) })
	if err != nil || !res.Duplicate || !bytes.Equal(res.Response, uncachedResponse) {
		t.Errorf("%s: not a duplicate: %+v, %v", key, res, err)
		return false
	}
	return true
}

// TestSharedSnapshotIsKeptUntilTheNextCommit: a duplicate's snapshot stays
// open for the next one, and the next write transaction rolls it back
// before it commits, so the commit's duplicates see the commit.
func TestSharedSnapshotIsKeptUntilTheNextCommit(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	_, err := applyUncached(db, "a", nil)
	require.NoError(t, err)
	require.Zero(t, oncekv.IdleSnapshots(db))
	for range 3 {
		require.True(t, checkDuplicate(t, db, "a"))
	}
	require.Equal(t, 1, oncekv.IdleSnapshots(db), "one snapshot, kept for the next duplicate")
	require.Equal(t, 1, db.Stats().File.OpenReadTxs)

	_, err = applyUncached(db, "b", nil)
	require.NoError(t, err)
	require.Zero(t, oncekv.IdleSnapshots(db), "the commit rolled the idle snapshot back")
	st := db.Stats().File
	require.Zero(t, st.OpenReadTxs)
	reads := st.ReadTxs
	found, err := oncekv.SnapshotHasMark(db, "h", "b")
	require.NoError(t, err)
	require.True(t, found, "a snapshot handed out after the commit sees it")
	require.True(t, checkDuplicate(t, db, "b"))
	require.True(t, checkDuplicate(t, db, "a"))
	require.Equal(t, reads+1, db.Stats().File.ReadTxs, "the duplicates after the commit shared one snapshot")
}

// TestSharedSnapshotsSeeEveryCommitThatReturned: while one goroutine applies
// new keys, eight others look up the key last applied, and every duplicate
// of it, in snapshots kept busy by duplicates of older keys: a snapshot
// handed out after a commit returned sees that commit.
func TestSharedSnapshotsSeeEveryCommitThatReturned(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	_, err := applyUncached(db, "k0", nil)
	require.NoError(t, err)
	const keys = 300
	var applied atomic.Int64 // the last key whose Apply returned
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		defer done.Store(true)
		for i := 1; i < keys; i++ {
			if _, err := applyUncached(db, fmt.Sprint("k", i), nil); err != nil {
				t.Error(err)
				return
			}
			applied.Store(int64(i))
		}
	})
	for g := range 8 {
		wg.Go(func() {
			for n := 0; !done.Load(); n++ {
				last := applied.Load()
				key := fmt.Sprint("k", last)
				found, err := oncekv.SnapshotHasMark(db, "h", key)
				if err != nil || !found {
					t.Errorf("%s, applied before the look-up began, not in its snapshot: %v", key, err)
					return
				}
				if !checkDuplicate(t, db, key) || !checkDuplicate(t, db, fmt.Sprint("k", (int64(n*8+g))%(last+1))) {
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestSharedSnapshotsNeverStallAGrowingFile: bbolt maps only what the file
// needs, so commits of large effects grow it past the map again and again,
// each remap waiting for every open read transaction, while eight
// goroutines answer duplicates from shared snapshots. It must finish: an
// idle snapshot left open across a commit would hang it.
func TestSharedSnapshotsNeverStallAGrowingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "grow.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, ExpireInterval: -1, InitialMmapSize: -1})
	require.NoError(t, err)
	for i := range 16 {
		_, err := applyUncached(db, fmt.Sprint("d", i), nil)
		require.NoError(t, err)
	}
	before, err := os.Stat(path)
	require.NoError(t, err)
	big := bytes.Repeat([]byte("x"), 256<<10)
	var writing atomic.Int32
	writing.Store(2)
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			defer writing.Add(-1)
			for i := range 48 {
				if _, err := applyUncached(db, fmt.Sprint("w", w, "-", i), big); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for g := range 8 {
		wg.Go(func() {
			for n := g; writing.Load() > 0; n++ {
				if !checkDuplicate(t, db, fmt.Sprint("d", n%16)) {
					return
				}
			}
		})
	}
	wg.Wait()
	after, err := os.Stat(path)
	require.NoError(t, err)
	require.Greater(t, after.Size(), before.Size()+16<<20, "the file grew well past its first map")

	// Now with no reader left to take an idle snapshot (and roll it back as
	// stale): only the commit's own draining lets it remap.
	for n := 0; oncekv.IdleSnapshots(db) < 2 && n < 1000; n++ {
		var two sync.WaitGroup
		for range 2 {
			two.Go(func() { checkDuplicate(t, db, "d0") })
		}
		two.Wait()
	}
	require.Positive(t, oncekv.IdleSnapshots(db))
	for i := range 12 {
		_, err := applyUncached(db, fmt.Sprint("quiet-", i), bytes.Repeat([]byte("y"), 4<<20))
		require.NoError(t, err)
	}
	last, err := os.Stat(path)
	require.NoError(t, err)
	require.Greater(t, last.Size(), after.Size()+32<<20, "the file grew past its map again")
	require.NoError(t, db.Close())
	oncetest.Check(t, path)
}

// TestCloseWithIdleSnapshots: Close rolls the idle snapshots back before
// bbolt's Close, which waits for every read transaction, whether Close
// writes (the clock moved on) or not (read-only), and the store reopens.
func TestCloseWithIdleSnapshots(t *testing.T) {
	path := filepath.Join(t.TempDir(), "close.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	require.NoError(t, err)
	_, err = applyUncached(db, "a", nil)
	require.NoError(t, err)
	require.True(t, checkDuplicate(t, db, "a"))
	require.Equal(t, 1, oncekv.IdleSnapshots(db))
	require.NoError(t, db.Close())

	ro, err := oncekv.Open(path, &oncekv.Options{ReadOnly: true, ExpireInterval: -1})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				checkDuplicate(t, ro, "a")
			}
		})
	}
	wg.Wait()
	require.Positive(t, oncekv.IdleSnapshots(ro))
	require.NoError(t, ro.Close())
	_, err = oncekv.SnapshotHasMark(ro, "h", "a")
	require.ErrorIs(t, err, oncekv.ErrClosed)

	db, err = oncekv.Open(path, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	require.NoError(t, err)
	require.True(t, checkDuplicate(t, db, "a"))
	require.NoError(t, db.Close())
	oncetest.Check(t, path)
}

// TestSharedSnapshotsAnswerAsOwnReadTransactions: the same requests, on a
// store whose every look-up opens a read transaction of its own and on one
// sharing snapshots, get the same results and move the same counters
// (outcomes, filter answers), with every filter answer a "maybe" too.
func TestSharedSnapshotsAnswerAsOwnReadTransactions(t *testing.T) {
	for _, maybe := range []bool{false, true} {
		t.Run(fmt.Sprint("maybe=", maybe), func(t *testing.T) {
			var stats [2]oncekv.Stats
			var results [2][]string
			for i, own := range []bool{true, false} {
				db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
				oncekv.SetOwnSnapshots(db, own)
				if maybe {
					oncekv.SetFilterHook(db, func(bool) bool { return true })
				}
				apply := func(key string, payload string, resp []byte) {
					res, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: key, Payload: []byte(payload)},
						func(*oncekv.Tx) ([]byte, error) { return resp, nil })
					results[i] = append(results[i], fmt.Sprintf("%s %v %q %v", key, res.Duplicate, res.Response, err))
				}
				for round := range 3 {
					for k := range 20 {
						resp := []byte("small")
						if k%2 == 0 {
							resp = uncachedResponse
						}
						apply(fmt.Sprint("k", k), "p", resp)
						if round == 2 && k%5 == 0 {
							apply(fmt.Sprint("k", k), "other payload", nil) // key reuse
						}
					}
				}
				var batch []oncekv.Request
				for k := range 30 { // 20 duplicates, 10 new keys, one key reused
					payload := "p"
					if k == 3 {
						payload = "reused"
					}
					batch = append(batch, oncekv.Request{Handler: "h", Key: fmt.Sprint("k", k), Payload: []byte(payload)})
				}
				br, err := db.ApplyBatch(context.Background(), batch, func(_ *oncekv.Tx, i int) ([]byte, error) { return []byte(fmt.Sprint("new", i)), nil })
				require.NoError(t, err)
				for _, r := range br {
					results[i] = append(results[i], fmt.Sprintf("batch %v %q %v", r.Duplicate, r.Response, r.Err))
				}
				fail := func(*oncekv.Tx) ([]byte, error) { return nil, oncekv.Permanent(fmt.Errorf("no")) }
				for range 2 {
					_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "failed"}, fail)
					results[i] = append(results[i], fmt.Sprint(err))
				}
				stats[i] = db.Stats()
			}
			require.Equal(t, results[0], results[1])
			require.Equal(t, stats[0].Total, stats[1].Total)
			require.Equal(t, stats[0].BloomNegatives, stats[1].BloomNegatives)
			require.Equal(t, stats[0].BloomFalsePositives, stats[1].BloomFalsePositives)
			require.Equal(t, stats[0].Commits, stats[1].Commits)
		})
	}
}
