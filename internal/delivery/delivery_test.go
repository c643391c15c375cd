package delivery_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/applycount"
	"github.com/oncekv/oncekv/internal/delivery"
	"github.com/oncekv/oncekv/internal/oncetest"
	"github.com/oncekv/oncekv/retry"
)

// Apply leaves the keyless deliveries out, indexes the results as the
// keys, runs each key's effect once, and answers a key repeated in the
// batch as a duplicate.
func TestApplyLeavesOutKeylessDeliveries(t *testing.T) {
	db := oncetest.Open(t, nil)
	keys := []string{"a", "", "b", "a"}
	var ran []int
	results, err := delivery.Apply(context.Background(), db, "h", keys,
		func(i int) []byte { return []byte("p-" + keys[i]) },
		func(tx *oncekv.Tx, i int) ([]byte, error) {
			ran = append(ran, i)
			return []byte("r-" + keys[i]), applycount.Add(tx, keys[i])
		})
	require.NoError(t, err)
	require.Len(t, results, len(keys))
	require.Equal(t, []int{0, 2}, ran, "the keyless one left out, the duplicate not run")
	require.Equal(t, oncekv.BatchResult{}, results[1])
	require.False(t, results[0].Duplicate)
	require.Equal(t, []byte("r-a"), results[0].Response)
	require.True(t, results[3].Duplicate)
	require.Equal(t, []byte("r-a"), results[3].Response)
	require.Equal(t, map[string]uint64{"a": 1, "b": 1}, oncetest.Applied(t, db))

	results, err = delivery.Apply(context.Background(), db, "h", []string{"", ""}, nil, nil)
	require.NoError(t, err, "nothing to apply: no ApplyBatch")
	require.Equal(t, make([]oncekv.BatchResult, 2), results)
}

// A batch that fails as a whole returns ApplyBatch's error.
func TestApplyReturnsTheBatchError(t *testing.T) {
	db := oncetest.Open(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := delivery.Apply(ctx, db, "h", []string{"a"}, func(int) []byte { return nil },
		func(*oncekv.Tx, int) ([]byte, error) { return nil, nil })
	require.ErrorIs(t, err, context.Canceled)
}

// Of concurrent Begins, exactly one wins until End.
func TestRunningLetsOneRunAtATime(t *testing.T) {
	var r delivery.Running
	busy := errors.New("busy")
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 16 {
		wg.Go(func() {
			if r.Begin(busy) == nil {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, 1, won)
	require.ErrorIs(t, r.Begin(busy), busy)
	r.End()
	require.NoError(t, r.Begin(busy))
}

func TestAgain(t *testing.T) {
	db := oncetest.Open(t, nil)
	ctx := context.Background()
	req := oncekv.Request{Handler: "h", Key: "held", Payload: []byte("p")}
	_, err := db.Claim(ctx, req, time.Minute)
	require.NoError(t, err)
	_, held := db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) { return nil, nil })
	require.ErrorIs(t, held, oncekv.ErrInProgress)

	r, err := retry.New(&retry.Policy{Base: time.Second, Cap: 4 * time.Second, MaxAttempts: 3})
	require.NoError(t, err)
	now := db.Now()
	var ipe *oncekv.InProgressError
	require.ErrorAs(t, held, &ipe)
	lease := ipe.LeaseUntil().Sub(now)
	require.Greater(t, lease, 4*time.Second)
	transient := errors.New("upstream down")
	for _, tc := range []struct {
		name     string
		err      error
		attempt  int
		maxWait  time.Duration
		again    bool
		delay    time.Duration // exact, or the bound of a jittered one
		jitter   bool
		attempts int // calls of attempt
	}{
		{name: "permanent", err: oncekv.Permanent(transient), attempt: 1, attempts: 0},
		{name: "claim held", err: held, attempt: 1, again: true, delay: lease, attempts: 0},
		{name: "claim held, capped", err: held, attempt: 1, maxWait: 4 * time.Second, again: true, delay: 4 * time.Second},
		{name: "transient", err: transient, attempt: 1, again: true, delay: time.Second, jitter: true, attempts: 1},
		{name: "attempts spent", err: transient, attempt: 3, attempts: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			delay, again := delivery.Again(ctx, tc.err, now, r, func() int { calls++; return tc.attempt }, tc.maxWait)
			require.Equal(t, tc.again, again)
			if tc.jitter {
				require.Less(t, delay, tc.delay)
			} else {
				require.Equal(t, tc.delay, delay)
			}
			require.Equal(t, tc.attempts, calls, "attempt is called only when the retry policy decides")
		})
	}

	// ctx's own end retries at once.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	delay, again := delivery.Again(cctx, cctx.Err(), now, r, func() int { return 1 }, 0)
	require.True(t, again)
	require.Zero(t, delay)
}

func TestVerdictAndClip(t *testing.T) {
	for v, s := range map[delivery.Verdict]string{delivery.Applied: "applied", delivery.Duplicate: "duplicate",
		delivery.GaveUp: "gave up", delivery.Retry: "retry", 9: "Verdict(9)"} {
		require.Equal(t, s, v.String())
	}
	long := string(make([]byte, 70))
	require.Equal(t, long[:64]+"…", delivery.Clip(long))
	require.Equal(t, "short", delivery.Clip("short"))
}

func TestSleep(t *testing.T) {
	require.True(t, delivery.Sleep(context.Background(), time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.False(t, delivery.Sleep(ctx, time.Hour))
}
