package oncekv_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/require"

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

// TestConcurrentCloseReturnsWhenClosed: a Close that finds another Close
// already running waits for it, so the file is free when either returns.
func TestConcurrentCloseReturnsWhenClosed(t *testing.T) {
	for round := range 3 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.db")
			opts := &oncekv.Options{NoSync: true, ExpireInterval: -1, OpenTimeout: 50 * time.Millisecond}
			db, err := oncekv.Open(path, opts)
			require.NoError(t, err)
			// An Apply in flight keeps the first Close waiting.
			entered, release := make(chan struct{}), make(chan struct{})
			applied := make(chan error, 1)
			go func() {
				_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, func(*oncekv.Tx) ([]byte, error) {
					close(entered)
					<-release
					return nil, nil
				})
				applied <- err
			}()
			<-entered
			first, second := make(chan error, 1), make(chan error, 1)
			go func() { first <- db.Close() }()
			require.Eventually(t, func() bool {
				return errors.Is(db.View(func(*oncekv.Tx) error { return nil }), oncekv.ErrClosed)
			}, hangLimit, time.Millisecond, "the first Close has begun")
			go func() { second <- db.Close() }()
			select {
			case err := <-second:
				// Returned while the first Close still waits: the file
				// must be closed already, or this is the bug.
				require.NoError(t, err)
				reopened, err := oncekv.Open(path, opts)
				require.NoError(t, err, "Close returned before the file was closed")
				require.NoError(t, reopened.Close())
			case <-time.After(time.Duration(10*(round+1)) * time.Millisecond):
			}
			close(release)
			require.NoError(t, <-applied)
			require.NoError(t, <-first)
			require.NoError(t, <-second)
			reopened, err := oncekv.Open(path, opts)
			require.NoError(t, err)
			require.NoError(t, reopened.Close())
		})
	}
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

// TestSettledRequestIsNotKeptReachable: once Apply has returned, the store
// keeps no reference to its request's payload or response (a 100 MiB
// response must not stay in memory until the next write).
func TestSettledRequestIsNotKeptReachable(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	ctx := context.Background()
	for _, size := range []int{1 << 16, 3 << 20} {
		payload := make([]byte, size)
		payload[0] = byte(size)
		var resp []byte
		res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: fmt.Sprint("k", size), Payload: payload}, func(*oncekv.Tx) ([]byte, error) {
			resp = make([]byte, size)
			return resp, nil
		})
		require.NoError(t, err)
		weakPayload, weakResp, weakResult := weak.Make(&payload[0]), weak.Make(&resp[0]), weak.Make(&res.Response[0])
		payload, resp, res = nil, nil, oncekv.Result{}
		_, _, _ = payload, resp, res
		gone := func() bool {
			runtime.GC()
			return weakPayload.Value() == nil && weakResp.Value() == nil && weakResult.Value() == nil
		}
		require.Eventually(t, gone, 5*time.Second, 10*time.Millisecond,
			"the request's payload and response stay reachable after Apply returned")
	}
}

// TestCountersCountOncePerDecision: a refused PutFenced and a Bloom
// look-up are counted once for the request that made them, however many
// times a batch's transaction had to run again because a request in it
// failed, and whether or not that request's own effect committed.
func TestCountersCountOncePerDecision(t *testing.T) {
	ctx := context.Background()
	run := func(t *testing.T, secondFails error) oncekv.Stats {
		db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
		require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("f"))
			if err != nil {
				return err
			}
			return b.PutFenced([]byte("x"), []byte("v"), 10)
		}))
		// One mark, so the window has a filter that answers for new keys.
		_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "seed"}, nil)
		require.NoError(t, err)
		before := db.Stats()
		reqs := []oncekv.Request{{Handler: "h", Key: "a"}, {Handler: "h", Key: "b"}, {Handler: "h", Key: "c"}}
		var refusals []error
		res, err := db.ApplyBatch(ctx, reqs, func(tx *oncekv.Tx, i int) ([]byte, error) {
			if i < 2 { // the first two requests each meet one refusal
				refusals = append(refusals, tx.Bucket([]byte("f")).PutFenced([]byte("x"), []byte("stale"), 3))
			}
			if i == 1 {
				return nil, secondFails
			}
			return nil, nil
		})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		require.NoError(t, res[2].Err)
		for _, err := range refusals {
			require.ErrorIs(t, err, oncekv.ErrFenced)
		}
		return db.Stats().Sub(before)
	}
	clean := run(t, nil)
	require.Equal(t, uint64(2), clean.FencedWrites)
	for name, fail := range map[string]error{"transient": errors.New("flaky"), "permanent": oncekv.Permanent(errors.New("bad"))} {
		t.Run(name, func(t *testing.T) {
			retried := run(t, fail)
			require.Equal(t, clean.FencedWrites, retried.FencedWrites, "a refusal in a transaction that ran again is counted once")
			require.Equal(t, clean.BloomNegatives, retried.BloomNegatives, "each look-up counted once")
			require.Equal(t, clean.BloomFalsePositives, retried.BloomFalsePositives)
		})
	}
}

// TestForgetKeepsTheMarkCountExact: the window's mark count follows every
// Apply and Forget exactly (Forget of a key without a mark changes
// nothing), so it can never go below the number of marks.
func TestForgetKeepsTheMarkCountExact(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	ctx := context.Background()
	const n = 40
	for i := range n {
		_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: fmt.Sprint(i)}, nil)
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Each key forgotten twice, concurrently: only one finds a mark.
			for range 2 {
				if err := db.Forget("h", fmt.Sprint(i/2*2)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, uint64(n/2), db.Stats().LiveMarks)
	require.NoError(t, db.Forget("h", "never seen"))
	require.Equal(t, uint64(n/2), db.Stats().LiveMarks)
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
