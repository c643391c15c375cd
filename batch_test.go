package oncekv_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

func TestApplyBatchGivesEachRequestItsOwnResult(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	_, err := db.Apply(ctx, oncekv.Request{Handler: "dep", Key: "old", Payload: []byte("1")}, deposit("acct", 1))
	require.NoError(t, err)

	errFlaky := errors.New("flaky")
	reqs := []oncekv.Request{
		{Handler: "dep", Key: "a", Payload: []byte("10")},     // 0 applied
		{Handler: "dep", Key: "old", Payload: []byte("1")},    // 1 duplicate of a committed key
		{Handler: "dep", Key: "a", Payload: []byte("10")},     // 2 duplicate within the batch
		{Handler: "", Key: "x"},                               // 3 invalid
		{Handler: "dep", Key: "flaky", Payload: []byte("20")}, // 4 transient error
		{Handler: "dep", Key: "bad", Payload: []byte("30")},   // 5 permanent error
		{Handler: "dep", Key: "old", Payload: []byte("999")},  // 6 key reuse
		{Handler: "dep", Key: "b", Payload: []byte("100")},    // 7 applied
	}
	amounts := []uint64{10, 1, 10, 0, 20, 30, 999, 100}
	runs := make([]int, len(reqs))
	results, err := db.ApplyBatch(ctx, reqs, func(tx *oncekv.Tx, i int) ([]byte, error) {
		runs[i]++
		resp, err := deposit("acct", amounts[i])(tx)
		switch reqs[i].Key {
		case "flaky":
			return nil, errFlaky
		case "bad":
			return nil, oncekv.Permanent(errors.New("rejected"))
		}
		return resp, err
	})
	require.NoError(t, err)
	require.Len(t, results, len(reqs))

	require.NoError(t, results[0].Err)
	require.False(t, results[0].Duplicate)
	require.NoError(t, results[1].Err)
	require.True(t, results[1].Duplicate)
	require.Equal(t, "acct=1", string(results[1].Response))
	require.NoError(t, results[2].Err)
	require.True(t, results[2].Duplicate)
	require.Equal(t, results[0].Response, results[2].Response)
	require.ErrorIs(t, results[3].Err, oncekv.ErrHandlerRequired)
	require.ErrorIs(t, results[4].Err, errFlaky)
	require.ErrorIs(t, results[5].Err, oncekv.ErrFailed)
	require.ErrorIs(t, results[6].Err, oncekv.ErrKeyReuse)
	require.NoError(t, results[7].Err)

	require.Equal(t, uint64(1+10+100), balance(t, db, "acct"))
	require.Zero(t, runs[1]+runs[2]+runs[3]+runs[6], "duplicates and bad requests never run the effect")

	// The failures were recorded as promised: flaky left nothing, bad is FAILED.
	res, err := db.Apply(ctx, reqs[4], deposit("acct", 20))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	_, err = db.Apply(ctx, reqs[5], nil)
	require.ErrorIs(t, err, oncekv.ErrFailed)
	require.Equal(t, uint64(131), balance(t, db, "acct"))
}

func TestApplyBatchContextDoneAppliesNothing(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	_, err := db.ApplyBatch(ctx, []oncekv.Request{{Handler: "h", Key: "k"}}, func(*oncekv.Tx, int) ([]byte, error) {
		ran = true
		return nil, nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, ran, "effect ran")

	res, err := db.ApplyBatch(context.Background(), nil, nil)
	require.NoError(t, err)
	require.Empty(t, res)
}

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
