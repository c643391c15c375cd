package oncekv_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// holdWriteLock starts an Update whose function blocks until the returned
// release is called, so the store's write lock stays taken meanwhile.
func holdWriteLock(t *testing.T, db *oncekv.DB) (release func()) {
	t.Helper()
	entered, done := make(chan struct{}), make(chan struct{})
	finished := make(chan error, 1)
	go func() {
		finished <- db.Update(func(*oncekv.Tx) error {
			close(entered)
			<-done
			return nil
		})
	}()
	<-entered
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(done)
			require.NoError(t, <-finished)
		})
	}
	t.Cleanup(release)
	return release
}

// waitCancelled runs call with a context that the test cancels while call
// waits for the write lock, and checks that call returns although the lock
// is still held: nothing applied, the context's error wrapped in a
// *RequestError.
func waitCancelled(t *testing.T, call func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- call(ctx) }()
	select {
	case err := <-errc:
		require.FailNow(t, "returned before its context ended, with the write lock taken", "err: %v", err)
	case <-time.After(20 * time.Millisecond): // let it start waiting; a late start is still a wait
	}
	cancel()
	requireCancelled(t, errc)
}

// TestDoneContextEndsTheWaitForTheWriteLock: Apply, Claim and ApplyBatch
// queued behind a long write (here an Update that holds the lock until the
// test lets it go) return their context's error as soon as it ends, and
// apply nothing.
func TestDoneContextEndsTheWaitForTheWriteLock(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	release := holdWriteLock(t, db)
	runs := 0
	effect := func(tx *oncekv.Tx) ([]byte, error) { runs++; return deposit("acct", 1)(tx) }

	t.Run("Apply", func(t *testing.T) {
		waitCancelled(t, func(ctx context.Context) error {
			_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "apply"}, effect)
			return err
		})
	})
	t.Run("Claim", func(t *testing.T) {
		waitCancelled(t, func(ctx context.Context) error {
			_, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "claim"}, time.Hour)
			return err
		})
	})
	t.Run("ApplyBatch", func(t *testing.T) {
		waitCancelled(t, func(ctx context.Context) error {
			res, err := db.ApplyBatch(ctx, []oncekv.Request{{Handler: "h", Key: "b1"}, {Handler: "h", Key: "b2"}},
				func(tx *oncekv.Tx, _ int) ([]byte, error) { return effect(tx) })
			if !errors.Is(err, context.Canceled) || len(res) != 2 {
				return fmt.Errorf("batch: %w, %d results", err, len(res))
			}
			for _, r := range res {
				if !errors.Is(r.Err, context.Canceled) {
					return fmt.Errorf("request: %w", r.Err)
				}
			}
			return res[0].Err
		})
	})
	t.Run("Apply queued behind a waiting Apply", func(t *testing.T) {
		// The first Apply leads the group and waits for the lock; the
		// second queues behind it. Cancelling either ends its own wait;
		// a third, whose context stays live, applies once the lock is free.
		ctxA, cancelA := context.WithCancel(context.Background())
		ctxB, cancelB := context.WithCancel(context.Background())
		errA, errB, errC := make(chan error, 1), make(chan error, 1), make(chan error, 1)
		go func() {
			_, err := db.Apply(ctxA, oncekv.Request{Handler: "h", Key: "A"}, effect)
			errA <- err
		}()
		time.Sleep(10 * time.Millisecond) // order A before B; either order must work
		go func() {
			_, err := db.Apply(ctxB, oncekv.Request{Handler: "h", Key: "B"}, effect)
			errB <- err
		}()
		go func() {
			_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "C"}, effect)
			errC <- err
		}()
		require.Eventually(t, func() bool { return oncekv.QueuedApplies(db) == 2 }, hangLimit, time.Millisecond)
		cancelB()
		requireCancelled(t, errB)
		cancelA()
		requireCancelled(t, errA)
		release()
		select {
		case err := <-errC:
			require.NoError(t, err)
		case <-time.After(hangLimit):
			require.FailNow(t, "the live caller was left without a leader")
		}
	})
	require.Equal(t, 1, runs, "only the caller whose context stayed live ran its effect")
	require.Equal(t, uint64(1), balance(t, db, "acct"))
	// Nothing was recorded for the cancelled keys: each applies afresh.
	for _, key := range []string{"apply", "b1", "A", "B"} {
		res, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: key}, effect)
		require.NoError(t, err)
		require.False(t, res.Duplicate, key)
	}
	c, err := db.Claim(context.Background(), oncekv.Request{Handler: "h", Key: "claim"}, time.Hour)
	require.NoError(t, err)
	require.False(t, c.Done())
}

func requireCancelled(t *testing.T, errc chan error) {
	t.Helper()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, context.Canceled)
		var re *oncekv.RequestError
		require.ErrorAs(t, err, &re)
	case <-time.After(hangLimit):
		require.FailNow(t, "a cancelled call kept waiting for the write lock")
	}
}

// TestApplyInsideAnEffectWaitsForItsContext: an effect that calls
// Apply on its own DB for a new key asks for the write lock its own
// commit holds. The inner call must give up when its context ends (every
// wait honours its context), and the outer call must still commit.
func TestApplyInsideAnEffectWaitsForItsContext(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	ctx := context.Background()
	var inner error
	res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "outer"}, func(*oncekv.Tx) ([]byte, error) {
		ictx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, inner = db.Apply(ictx, oncekv.Request{Handler: "h", Key: "inner"}, func(*oncekv.Tx) ([]byte, error) {
			return []byte("inner"), nil
		})
		return []byte("outer"), nil
	})
	require.NoError(t, err)
	require.Equal(t, "outer", string(res.Response))
	require.ErrorIs(t, inner, context.DeadlineExceeded)
	// The inner key was not applied: a later Apply runs its effect.
	ran := 0
	res, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "inner"}, respond(&ran, "later"))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, 1, ran)
}

// TestAppendedKeysPackPages: keys that only grow (offsets, ULIDs) leave the
// pages of their window bucket, and of the user bucket their effects write
// to, packed full, where bbolt's default would leave them half empty;
// random keys, and a transaction that writes one key between others
// first and appends after it, keep bbolt's default, which leaves the room
// inserts need.
func TestAppendedKeysPackPages(t *testing.T) {
	const n = 5000
	straggling := batchesOf(n, false)
	for i := 1; i < len(straggling); i++ {
		// Each batch starts with a key that sorts between the previous
		// batch's last two, then appends.
		straggling[i] = append([]string{straggling[i-1][len(straggling[i-1])-2] + "a"}, straggling[i]...)
	}
	packed := func(s bolt.BucketStats) float64 { return float64(s.LeafInuse) / float64(s.LeafAlloc) }
	for _, tc := range []struct {
		name    string
		batches [][]string
		full    bool
	}{
		{"ascending", batchesOf(n, false), true},
		{"random", batchesOf(n, true), false},
		{"one-insert-then-appends", straggling, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.db")
			loadSizeKeys(t, path, tc.batches)
			marks, rows := sizeStats(t, path)
			require.Equal(t, len(slices.Concat(tc.batches...)), marks.KeyN)
			for name, st := range map[string]bolt.BucketStats{"marks": marks, "effect rows": rows} {
				if tc.full {
					require.Greater(t, packed(st), 0.9, "%s: %d of %d leaf bytes in use", name, st.LeafInuse, st.LeafAlloc)
				} else {
					require.Less(t, packed(st), 0.8, "%s: %d of %d leaf bytes in use", name, st.LeafInuse, st.LeafAlloc)
				}
			}
		})
	}
}
