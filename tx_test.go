package oncekv_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
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

func TestTxNextFenceSharesCounterAndRollsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	first, err := db.NextFence("r")
	require.NoError(t, err)

	var inTx []uint64
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		for range 3 {
			tok, err := tx.NextFence("r")
			require.NoError(t, err)
			inTx = append(inTx, tok)
		}
		return nil
	}))
	require.Equal(t, []uint64{first + 1, first + 2, first + 3}, inTx)

	// Rolled back: the next token is as if they were never issued.
	boom := errors.New("boom")
	require.ErrorIs(t, db.Update(func(tx *oncekv.Tx) error {
		_, err := tx.NextFence("r")
		require.NoError(t, err)
		return boom
	}), boom)
	next, err := db.NextFence("r")
	require.NoError(t, err)
	require.Equal(t, first+4, next)

	// Bad input and read-only transactions: typed errors naming the resource.
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		_, err := tx.NextFence("")
		require.ErrorIs(t, err, oncekv.ErrResourceRequired)
		return nil
	}))
	require.NoError(t, db.View(func(tx *oncekv.Tx) error {
		_, err := tx.NextFence("r")
		require.ErrorIs(t, err, oncekv.ErrTxNotWritable)
		require.Contains(t, err.Error(), `"r"`)
		return nil
	}))

	// Persisted across reopen.
	require.NoError(t, db.Close())
	db, err = oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		tok, err := tx.NextFence("r")
		require.Equal(t, first+5, tok)
		return err
	}))
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
