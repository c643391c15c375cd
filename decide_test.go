package oncekv_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// callerStack reports whether the goroutine calling it has fn's frame on
// its stack.
func callerStack(fn string) bool {
	buf := make([]byte, 64<<10)
	return strings.Contains(string(buf[:runtime.Stack(buf, false)]), "oncekv_test."+fn+"(")
}

// TestLoneApplyRunsItsEffectOnTheCallersGoroutine: a call that commits
// alone takes the group commit's fast path, its effect running on the
// caller's own goroutine rather than on one started for it (Apply's doc);
// so does a claim's Complete.
func TestLoneApplyRunsItsEffectOnTheCallersGoroutine(t *testing.T) {
	const self = "TestLoneApplyRunsItsEffectOnTheCallersGoroutine"
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	var onCaller bool
	res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "apply"}, func(*oncekv.Tx) ([]byte, error) {
		onCaller = callerStack(self)
		return []byte("ok"), nil
	})
	require.NoError(t, err)
	require.Equal(t, []byte("ok"), res.Response)
	require.True(t, onCaller, "Apply's effect ran on another goroutine than its caller's")

	c, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "claim"}, time.Hour)
	require.NoError(t, err)
	onCaller = false
	_, err = c.Complete(ctx, []byte("done"), func(*oncekv.Tx) error {
		onCaller = callerStack(self)
		return nil
	})
	require.NoError(t, err)
	require.True(t, onCaller, "Complete's effect ran on another goroutine than its caller's")
}

// TestLoneApplyGoexitCountsAsEffectError: on the fast path, an effect that
// calls runtime.Goexit ends its caller's goroutine there and then, and the
// request still counts in Stats.EffectErrors, as it does when its commit
// is shared.
func TestLoneApplyGoexitCountsAsEffectError(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	returned, p, hung := within(t, "Apply", func() {
		_, _ = db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, func(*oncekv.Tx) ([]byte, error) {
			runtime.Goexit()
			return nil, nil
		})
	})
	require.False(t, hung)
	require.False(t, returned, "the caller's goroutine exits")
	require.Nil(t, p)
	st := db.Stats()
	require.Equal(t, uint64(1), st.Total.EffectErrors)
	require.Equal(t, uint64(1), st.Handlers["h"].EffectErrors)
	require.Zero(t, st.Total.Applied)
}

// failKind is how a request's effect ends in the bounded-work tests.
type failKind uint8

const (
	effectOK failKind = iota
	effectTransient
	effectPermanent
)

func randomKinds(rng *rand.Rand, n int, failRate float64) []failKind {
	kinds := make([]failKind, n)
	for i := range kinds {
		if rng.Float64() < failRate {
			kinds[i] = effectTransient + failKind(rng.IntN(2))
		}
	}
	return kinds
}

// kindEffect deposits 1, then ends as kind says.
func kindEffect(tx *oncekv.Tx, kind failKind, errFlaky error) ([]byte, error) {
	if _, err := deposit("acct", 1)(tx); err != nil {
		return nil, err
	}
	switch kind {
	case effectTransient:
		return nil, errFlaky
	case effectPermanent:
		return nil, oncekv.Permanent(errFlaky)
	}
	return nil, nil
}

// checkFailureModel checks the store against what the kinds say: every OK
// request applied once, every permanent one FAILED, every transient one
// unrecorded.
func checkFailureModel(t *testing.T, db *oncekv.DB, keys []string, kinds []failKind) {
	t.Helper()
	ok := 0
	for _, k := range kinds {
		if k == effectOK {
			ok++
		}
	}
	require.Equal(t, uint64(ok), balance(t, db, "acct"), "each successful effect committed exactly once")
	for i, key := range keys {
		ran := false
		_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: key}, func(*oncekv.Tx) ([]byte, error) {
			ran = true
			return nil, nil
		})
		switch kinds[i] {
		case effectOK:
			require.NoError(t, err, key)
			require.False(t, ran, key)
		case effectPermanent:
			require.ErrorIs(t, err, oncekv.ErrFailed, key)
			require.False(t, ran, key)
		case effectTransient:
			require.NoError(t, err, key)
			require.True(t, ran, "a transient failure records nothing: %s", key)
		}
	}
}

// TestBatchWithFailuresDoesBoundedWork: an ApplyBatch whose effects fail
// here and there runs each effect a bounded number of times (at most twice,
// plus once for each failure), not once per failure, and ends in the state
// the model predicts.
func TestBatchWithFailuresDoesBoundedWork(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for _, tc := range []struct {
		n    int
		rate float64
	}{{300, 0.5}, {500, 0.05}, {200, 1}, {400, 0}} {
		t.Run(fmt.Sprintf("n=%d rate=%v", tc.n, tc.rate), func(t *testing.T) {
			db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
			kinds := randomKinds(rng, tc.n, tc.rate)
			if tc.rate == 0.5 { // the worst case of the report: the last half fails
				for i := range kinds {
					kinds[i] = effectOK
					if i >= tc.n/2 {
						kinds[i] = effectTransient
					}
				}
			}
			reqs := make([]oncekv.Request, tc.n)
			keys := make([]string, tc.n)
			failures := 0
			for i := range reqs {
				keys[i] = fmt.Sprint("k", i)
				reqs[i] = oncekv.Request{Handler: "h", Key: keys[i]}
				if kinds[i] != effectOK {
					failures++
				}
			}
			var calls int
			errFlaky := errors.New("flaky")
			results, err := db.ApplyBatch(context.Background(), reqs, func(tx *oncekv.Tx, i int) ([]byte, error) {
				calls++
				return kindEffect(tx, kinds[i], errFlaky)
			})
			require.NoError(t, err)
			for i, r := range results {
				if kinds[i] == effectOK {
					require.NoError(t, r.Err)
				} else {
					require.ErrorIs(t, r.Err, errFlaky)
				}
			}
			require.LessOrEqual(t, calls, 2*tc.n+failures, "effect calls for %d requests, %d failing", tc.n, failures)
			checkFailureModel(t, db, keys, kinds)
		})
	}
}

// TestGroupWithFailuresDoesBoundedWork: the same bound for concurrent Apply
// calls that share one group commit (lined up behind a running commit).
func TestGroupWithFailuresDoesBoundedWork(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	ctx := context.Background()
	const n = 60
	kinds := randomKinds(rng, n, 0.4)
	kinds[0] = effectOK // the leader
	keys := make([]string, n)
	failures := 0
	for i := range keys {
		keys[i] = fmt.Sprint("g", i)
		if kinds[i] != effectOK {
			failures++
		}
	}
	var calls atomic.Int64
	errFlaky := errors.New("flaky")
	entered, release := make(chan struct{}), make(chan struct{})
	effect := func(i int) func(tx *oncekv.Tx) ([]byte, error) {
		return func(tx *oncekv.Tx) ([]byte, error) {
			calls.Add(1)
			if i == 0 {
				select {
				case <-entered:
				default:
					close(entered)
					<-release
				}
			}
			return kindEffect(tx, kinds[i], errFlaky)
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() { _, errs[0] = db.Apply(ctx, oncekv.Request{Handler: "h", Key: keys[0]}, effect(0)) })
	<-entered
	for i := 1; i < n; i++ {
		wg.Go(func() { _, errs[i] = db.Apply(ctx, oncekv.Request{Handler: "h", Key: keys[i]}, effect(i)) })
	}
	require.Eventually(t, func() bool { return oncekv.QueuedApplies(db) == n-1 }, hangLimit, time.Millisecond)
	close(release)
	wg.Wait()
	for i, err := range errs {
		if kinds[i] == effectOK {
			require.NoError(t, err)
		} else {
			require.ErrorIs(t, err, errFlaky)
		}
	}
	require.LessOrEqual(t, int(calls.Load()), 2*n+failures, "effect calls for %d requests, %d failing", n, failures)
	checkFailureModel(t, db, keys, kinds)
}

// TestResponseTooLargeFailsOnlyItsRequest: a response over the mark's size
// limit fails its own request with ErrResponseTooLarge (naming the size and
// the limit) and rolls back its effect; the other requests of the same
// batch or group commit apply, and Claim.Complete refuses it and keeps the
// claim.
func TestResponseTooLargeFailsOnlyItsRequest(t *testing.T) {
	ctx := context.Background()
	limit := 1000 + rand.IntN(1000)
	open := func(t *testing.T) *oncekv.DB {
		db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
		oncekv.SetMaxResponseSize(db, limit)
		return db
	}
	respond := func(size int) func(tx *oncekv.Tx) ([]byte, error) {
		return func(tx *oncekv.Tx) ([]byte, error) {
			if _, err := deposit("acct", 1)(tx); err != nil {
				return nil, err
			}
			return make([]byte, size), nil
		}
	}
	requireTooLarge := func(t *testing.T, err error, size int) {
		t.Helper()
		require.ErrorIs(t, err, oncekv.ErrResponseTooLarge)
		require.ErrorContains(t, err, fmt.Sprint(size))
		require.ErrorContains(t, err, fmt.Sprint(limit))
	}
	t.Run("Apply", func(t *testing.T) {
		db := open(t)
		_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "big"}, respond(limit+1))
		requireTooLarge(t, err, limit+1)
		res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "fits"}, respond(limit))
		require.NoError(t, err)
		require.Len(t, res.Response, limit)
		require.Equal(t, uint64(1), balance(t, db, "acct"))
	})
	t.Run("ApplyBatch", func(t *testing.T) {
		db := open(t)
		sizes := []int{10, limit + 7, limit, 3 * limit}
		reqs := make([]oncekv.Request, len(sizes))
		for i := range reqs {
			reqs[i] = oncekv.Request{Handler: "h", Key: fmt.Sprint("b", i)}
		}
		res, err := db.ApplyBatch(ctx, reqs, func(tx *oncekv.Tx, i int) ([]byte, error) { return respond(sizes[i])(tx) })
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		requireTooLarge(t, res[1].Err, limit+7)
		require.NoError(t, res[2].Err)
		requireTooLarge(t, res[3].Err, 3*limit)
		require.Equal(t, uint64(2), balance(t, db, "acct"))
	})
	t.Run("group commit", func(t *testing.T) {
		db := open(t)
		entered, release := make(chan struct{}), make(chan struct{})
		var wg sync.WaitGroup
		var leaderErr error
		wg.Go(func() {
			_, leaderErr = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "leader"}, func(tx *oncekv.Tx) ([]byte, error) {
				close(entered)
				<-release
				return respond(1)(tx)
			})
		})
		<-entered
		sizes := []int{5, limit * 2, 5}
		errs := make([]error, len(sizes))
		for i, size := range sizes {
			wg.Go(func() {
				_, errs[i] = db.Apply(ctx, oncekv.Request{Handler: "h", Key: fmt.Sprint("g", i)}, respond(size))
			})
		}
		require.Eventually(t, func() bool { return oncekv.QueuedApplies(db) == len(sizes) }, hangLimit, time.Millisecond)
		close(release)
		wg.Wait()
		require.NoError(t, leaderErr)
		require.NoError(t, errs[0])
		requireTooLarge(t, errs[1], 2*limit)
		require.NoError(t, errs[2])
		require.Equal(t, uint64(3), balance(t, db, "acct"))
	})
	t.Run("Claim.Complete", func(t *testing.T) {
		db := open(t)
		c, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "c"}, time.Hour)
		require.NoError(t, err)
		_, err = c.Complete(ctx, make([]byte, limit+1), func(tx *oncekv.Tx) error { _, err := deposit("acct", 1)(tx); return err })
		requireTooLarge(t, err, limit+1)
		require.Zero(t, balance(t, db, "acct"))
		require.False(t, c.Done())
		res, err := c.Complete(ctx, make([]byte, limit), nil)
		require.NoError(t, err, "the claim still holds its key")
		require.Len(t, res.Response, limit)
	})
	t.Run("Permanent error message", func(t *testing.T) {
		db := open(t)
		long := errors.New(string(make([]byte, limit+1)))
		_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "p"}, func(*oncekv.Tx) ([]byte, error) { return nil, oncekv.Permanent(long) })
		requireTooLarge(t, err, limit+1)
	})
}

// TestGoexitInEffectDoesNotWedgeTheStore: an effect that calls
// runtime.Goexit (t.FailNow, require.* from a test) ends its caller's
// goroutine; every lock is released, nothing of the effect is recorded, and
// the next write and Close go through.
func TestGoexitInEffectDoesNotWedgeTheStore(t *testing.T) {
	ctx := context.Background()
	goexit := func(tx *oncekv.Tx) ([]byte, error) {
		if _, err := deposit("acct", 100)(tx); err != nil {
			return nil, err
		}
		runtime.Goexit()
		return nil, nil
	}
	cases := map[string]func(db *oncekv.DB){
		"Apply": func(db *oncekv.DB) {
			_, _ = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "k"}, goexit)
		},
		"ApplyBatch": func(db *oncekv.DB) {
			reqs := []oncekv.Request{{Handler: "h", Key: "a"}, {Handler: "h", Key: "k"}}
			_, _ = db.ApplyBatch(ctx, reqs, func(tx *oncekv.Tx, i int) ([]byte, error) { return goexit(tx) })
		},
		"Update": func(db *oncekv.DB) {
			_ = db.Update(func(tx *oncekv.Tx) error { _, err := goexit(tx); return err })
		},
		"Claim.Complete": func(db *oncekv.DB) {
			c, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "k"}, time.Hour)
			if err != nil {
				return
			}
			_, _ = c.Complete(ctx, []byte("r"), func(tx *oncekv.Tx) error { _, err := goexit(tx); return err })
		},
	}
	for name, call := range cases {
		t.Run(name, func(t *testing.T) {
			db := openUnchecked(t)
			returned, p := mustWithin(t, name, func() { call(db) })
			require.False(t, returned, "the caller's goroutine exits, as Goexit demands")
			require.Nil(t, p)
			require.Zero(t, balance(t, db, "acct"), "the effect's writes rolled back")
			requireHealthy(t, db, "next")
		})
	}
}

// TestGoexitInGroupMemberEndsOnlyThatCaller: under group commit one
// goroutine (the leader) commits the requests of every caller in the group.
// An effect that calls runtime.Goexit must end its own caller's goroutine
// only, never the leader's (when it is a follower's) nor the followers'
// (when it is the leader's); everyone else completes.
func TestGoexitInGroupMemberEndsOnlyThatCaller(t *testing.T) {
	const followers = 4
	for _, bad := range []int{-1, 0, 3} { // the leader, the first follower, a later one
		t.Run(fmt.Sprint("caller ", bad), func(t *testing.T) {
			db := openUnchecked(t)
			ctx := context.Background()
			entered, release := make(chan struct{}), make(chan struct{})
			returned := make([]bool, 1+followers) // the leader, then the followers
			errs := make([]error, 1+followers)
			apply := func(i int, effect func(tx *oncekv.Tx) ([]byte, error)) {
				returned[i+1], _, _ = within(t, "Apply", func() {
					_, errs[i+1] = db.Apply(ctx, oncekv.Request{Handler: "h", Key: fmt.Sprint("k", i)}, func(tx *oncekv.Tx) ([]byte, error) {
						if _, err := effect(tx); err != nil {
							return nil, err
						}
						if i == bad {
							runtime.Goexit()
						}
						return deposit("acct", 1)(tx)
					})
				})
			}
			var wg sync.WaitGroup
			wg.Go(func() {
				apply(-1, func(*oncekv.Tx) ([]byte, error) {
					close(entered)
					<-release
					return nil, nil
				})
			})
			<-entered
			for i := range followers {
				wg.Go(func() { apply(i, func(*oncekv.Tx) ([]byte, error) { return nil, nil }) })
			}
			require.Eventually(t, func() bool { return oncekv.QueuedApplies(db) == followers }, hangLimit, time.Millisecond)
			close(release)
			wg.Wait()
			for i := range returned {
				if i == bad+1 {
					require.False(t, returned[i], "the caller whose effect called Goexit exits")
					continue
				}
				require.True(t, returned[i], "caller %d", i-1)
				require.NoError(t, errs[i])
			}
			require.Equal(t, uint64(followers), balance(t, db, "acct"), "everyone but the one that called Goexit applied")
			requireHealthy(t, db, "next")
		})
	}
}
