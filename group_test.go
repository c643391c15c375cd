package oncekv_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// TestGroupCommitIsolatesFailures runs many concurrent Apply calls, some of
// whose effects fail or panic, so groups roll back and re-run: the committed
// state must hold exactly the successful effects, once each. The workers
// report what went wrong in errs; only the test's goroutine calls require.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	const workers, perWorker = 16, 60
	var wg sync.WaitGroup
	var mu sync.Mutex
	want := map[string]uint64{}
	errs := make([]error, workers) // each worker's first problem
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				key := fmt.Sprintf("w%d-%d", w, i)
				acct := fmt.Sprintf("acct%d", i%4)
				req := oncekv.Request{Handler: "dep", Key: key}
				var problem error
				switch i % 5 {
				case 1:
					_, err := db.Apply(ctx, req, func(tx *oncekv.Tx) ([]byte, error) {
						_, _ = deposit(acct, 1000)(tx)
						return nil, errors.New("transient")
					})
					if err == nil {
						problem = errors.New("a failing effect's Apply returned nil")
					}
				case 2:
					p := panicOf(func() {
						_, _ = db.Apply(ctx, req, func(tx *oncekv.Tx) ([]byte, error) {
							_, _ = deposit(acct, 1000)(tx)
							panic("effect panicked")
						})
					})
					if p != "effect panicked" {
						problem = fmt.Errorf("the effect's panic reached its caller as %v", p)
					}
				case 3:
					_, err := db.Apply(ctx, req, func(tx *oncekv.Tx) ([]byte, error) {
						_, _ = deposit(acct, 1000)(tx)
						return nil, oncekv.Permanent(errors.New("permanent"))
					})
					if !errors.Is(err, oncekv.ErrFailed) {
						problem = fmt.Errorf("permanent failure: want ErrFailed, got %v", err)
					}
				default:
					_, err := db.Apply(ctx, req, deposit(acct, 1))
					if err != nil {
						problem = err
						break
					}
					mu.Lock()
					want[acct]++
					mu.Unlock()
				}
				if problem != nil {
					errs[w] = fmt.Errorf("%s: %w", key, problem)
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	for acct, n := range want {
		require.Equal(t, n, balance(t, db, acct), acct)
	}
	st := db.Stats().Total
	require.Equal(t, uint64(workers*perWorker*2/5), st.Applied)
	require.Equal(t, uint64(workers*perWorker/5), st.FailedRecorded)
}

// panicOf runs fn and returns what it panicked with, nil if it returned.
func panicOf(fn func()) (p any) {
	defer func() { p = recover() }()
	fn()
	return nil
}

// TestGroupCommitUnderCancellationsKeepsEveryPromise: many callers share
// group commits while their contexts end at random moments (before the
// call, while queued, while leading, during the effect) and some effects
// fail. Whatever the interleaving: an Apply that returned nil applied its
// effect exactly once; one that returned its context's error or the
// effect's applied nothing, so a retry runs the effect; and nobody hangs.
func TestGroupCommitUnderCancellationsKeepsEveryPromise(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1, MaxGroupSize: 5})
	const workers, perWorker = 12, 40
	errFlaky := errors.New("flaky")
	runs := []byte("runs")
	effect := func(key string, fail bool) func(tx *oncekv.Tx) ([]byte, error) {
		return func(tx *oncekv.Tx) ([]byte, error) {
			b, err := tx.CreateBucketIfNotExists(runs)
			if err != nil {
				return nil, err
			}
			if err := b.Put([]byte(key), uintBytes(readUint(b.Get([]byte(key)))+1)); err != nil {
				return nil, err
			}
			if fail {
				return nil, errFlaky
			}
			return nil, nil
		}
	}
	results := make([][]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		results[w] = make([]error, perWorker)
		wg.Go(func() {
			for i := range perWorker {
				key := fmt.Sprintf("w%d-%d", w, i)
				ctx, cancel := context.WithCancel(context.Background())
				switch rng.IntN(4) {
				case 0:
					time.AfterFunc(time.Duration(rng.IntN(300))*time.Microsecond, cancel)
				case 1:
					go cancel()
				}
				_, results[w][i] = db.Apply(ctx, oncekv.Request{Handler: "h", Key: key}, effect(key, rng.IntN(5) == 0))
				cancel()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(hangLimit):
		require.FailNow(t, "callers hung")
	}
	applied := 0
	for w := range workers {
		for i, err := range results[w] {
			key := fmt.Sprintf("w%d-%d", w, i)
			var n uint64
			require.NoError(t, db.View(func(tx *oncekv.Tx) error {
				if b := tx.Bucket(runs); b != nil {
					n = readUint(b.Get([]byte(key)))
				}
				return nil
			}))
			ran := false
			_, again := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: key}, func(*oncekv.Tx) ([]byte, error) {
				ran = true
				return nil, nil
			})
			require.NoError(t, again)
			if err == nil {
				applied++
				require.Equal(t, uint64(1), n, "%s: acknowledged, so applied once", key)
				require.False(t, ran, "%s: acknowledged, so a retry is a duplicate", key)
				continue
			}
			require.True(t, errors.Is(err, context.Canceled) || errors.Is(err, errFlaky), "%s: %v", key, err)
			require.Zero(t, n, "%s: failed, so nothing applied", key)
			require.True(t, ran, "%s: failed, so a retry runs the effect", key)
		}
	}
	t.Logf("%d of %d applied", applied, workers*perWorker)
	require.Positive(t, applied)
}
