package oncekv_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// requireStatsAddUp checks that Total is the sum of every handler entry
// and the overflow entry, plus the store-wide invalid count.
func requireStatsAddUp(t *testing.T, st oncekv.Stats) {
	t.Helper()
	sum := st.OtherHandlers
	for h, c := range st.Handlers {
		require.Zero(t, c.InvalidRequests, "handler %.40q: invalid requests count store-wide only", h)
		sum.Applied += c.Applied
		sum.DuplicatesSuppressed += c.DuplicatesSuppressed
		sum.Aborted += c.Aborted
		sum.KeyReuses += c.KeyReuses
	}
	require.Equal(t, st.Total.Applied, sum.Applied)
	require.Equal(t, st.Total.DuplicatesSuppressed, sum.DuplicatesSuppressed)
	require.Equal(t, st.Total.Aborted, sum.Aborted)
	require.Equal(t, st.Total.KeyReuses, sum.KeyReuses)
}

// TestInvalidRequestsCreateNoHandlerEntries sends requests that are bad
// input, each under a handler name never seen before (thousands of
// distinct names, and a hundred names of 1 MiB), through Apply, ApplyBatch
// and Claim. None of them may create a per-handler entry or keep its name
// alive; each is counted once, store-wide, in Total.InvalidRequests.
func TestInvalidRequestsCreateNoHandlerEntries(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx := context.Background()
	const distinct, huge = 3000, 100
	sent := 0
	for i := range distinct {
		req := oncekv.Request{Handler: fmt.Sprintf("h-%d", i)} // no key
		switch i % 3 {
		case 0:
			_, err := db.Apply(ctx, req, nil)
			require.ErrorIs(t, err, oncekv.ErrKeyRequired)
		case 1:
			res, err := db.ApplyBatch(ctx, []oncekv.Request{req, {Key: "k"}}, nil)
			require.NoError(t, err)
			require.ErrorIs(t, res[0].Err, oncekv.ErrKeyRequired)
			require.ErrorIs(t, res[1].Err, oncekv.ErrHandlerRequired)
			sent++
		case 2:
			_, err := db.Claim(ctx, req, time.Minute)
			require.ErrorIs(t, err, oncekv.ErrKeyRequired)
		}
		sent++
	}
	for i := range huge {
		name := fmt.Sprintf("%d-%s", i, strings.Repeat("h", 1<<20))
		_, err := db.Apply(ctx, oncekv.Request{Handler: name, Key: "k"}, nil)
		require.ErrorIs(t, err, oncekv.ErrKeyTooLarge)
		_, err = db.Claim(ctx, oncekv.Request{Handler: name, Key: "k"}, time.Minute)
		require.ErrorIs(t, err, oncekv.ErrKeyTooLarge)
		sent += 2
	}
	st := db.Stats()
	require.Empty(t, st.Handlers, "invalid requests must not create entries")
	require.Equal(t, oncekv.Counters{}, st.OtherHandlers)
	require.Equal(t, uint64(sent), st.Total.InvalidRequests)
	requireStatsAddUp(t, st)

	// A valid request still gets its entry, with nothing invalid in it.
	_, err := db.Apply(ctx, oncekv.Request{Handler: "h-1", Key: "k"}, nil)
	require.NoError(t, err)
	st = db.Stats()
	require.Equal(t, map[string]oncekv.Counters{"h-1": {Applied: 1}}, st.Handlers)
	require.Equal(t, uint64(sent), st.Total.InvalidRequests)
}

// TestAbortedHugeHandlerIsNotKept: a call whose context is already done is
// counted before its request is validated. A handler name no request could
// carry (longer than bbolt's largest key) must still not become an entry.
func TestAbortedHugeHandlerIsNotKept(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 20 {
		name := fmt.Sprintf("%d-%s", i, strings.Repeat("h", 1<<20))
		_, err := db.Apply(ctx, oncekv.Request{Handler: name, Key: "k"}, nil)
		require.ErrorIs(t, err, context.Canceled)
		_, err = db.Claim(ctx, oncekv.Request{Handler: name, Key: "k"}, time.Minute)
		require.ErrorIs(t, err, context.Canceled)
	}
	st := db.Stats()
	for h := range st.Handlers {
		require.LessOrEqual(t, len(h), bolt.MaxKeySize, "a handler name no request can carry was kept")
	}
	require.Empty(t, st.Handlers)
	require.Equal(t, uint64(40), st.OtherHandlers.Aborted)
	require.Equal(t, uint64(40), st.Total.Aborted)
}

// TestHandlerStatsCappedAtMax: more valid handlers than
// Options.MaxHandlerStats, sequential then concurrent. The first handlers
// keep their entries, the map stops at the cap, the rest are summed in
// OtherHandlers, and the totals count every request.
func TestHandlerStatsCappedAtMax(t *testing.T) {
	ctx := context.Background()
	t.Run("sequential", func(t *testing.T) {
		const limit, handlers = 7, 30
		db := oncetest.Open(t, &oncekv.Options{NoSync: true, MaxHandlerStats: limit})
		for h := range handlers {
			for k := range 2 {
				req := oncekv.Request{Handler: fmt.Sprintf("handler-%02d", h), Key: fmt.Sprint("k", k)}
				for range 2 { // the second delivery is a duplicate
					_, err := db.Apply(ctx, req, nil)
					require.NoError(t, err)
				}
			}
		}
		st := db.Stats()
		require.Len(t, st.Handlers, limit)
		for h := range limit {
			require.Equal(t, oncekv.Counters{Applied: 2, DuplicatesSuppressed: 2}, st.Handlers[fmt.Sprintf("handler-%02d", h)],
				"the first handlers seen keep their entries")
		}
		require.Equal(t, oncekv.Counters{Applied: 2 * (handlers - limit), DuplicatesSuppressed: 2 * (handlers - limit)}, st.OtherHandlers)
		require.Equal(t, oncekv.Counters{Applied: 2 * handlers, DuplicatesSuppressed: 2 * handlers}, st.Total)
		requireStatsAddUp(t, st)

		// Sub keeps the overflow entry's delta too.
		_, err := db.Apply(ctx, oncekv.Request{Handler: "late", Key: "k"}, nil)
		require.NoError(t, err)
		d := db.Stats().Sub(st)
		require.Equal(t, uint64(1), d.OtherHandlers.Applied)
		require.Equal(t, uint64(1), d.Total.Applied)
	})
	t.Run("concurrent", func(t *testing.T) {
		const limit, workers, each = 5, 8, 40
		db := oncetest.Open(t, &oncekv.Options{NoSync: true, MaxHandlerStats: limit})
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					req := oncekv.Request{Handler: fmt.Sprintf("w%d-h%d", w, i%10), Key: fmt.Sprint("k", i)}
					if _, err := db.Apply(ctx, req, nil); err != nil {
						errs[w] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		st := db.Stats()
		require.Len(t, st.Handlers, limit, "concurrent new names must not overshoot the cap")
		require.Equal(t, uint64(workers*each), st.Total.Applied)
		requireStatsAddUp(t, st)
	})
	t.Run("negative keeps no entries", func(t *testing.T) {
		db := oncetest.Open(t, &oncekv.Options{NoSync: true, MaxHandlerStats: -1})
		for i := range 5 {
			_, err := db.Apply(ctx, oncekv.Request{Handler: fmt.Sprint("h", i), Key: "k"}, nil)
			require.NoError(t, err)
		}
		st := db.Stats()
		require.Empty(t, st.Handlers)
		require.Equal(t, uint64(5), st.OtherHandlers.Applied)
		require.Equal(t, uint64(5), st.Total.Applied)
	})
	t.Run("default", func(t *testing.T) {
		db := oncetest.Open(t, &oncekv.Options{NoSync: true})
		reqs := make([]oncekv.Request, oncekv.DefaultMaxHandlerStats+50)
		for i := range reqs {
			reqs[i] = oncekv.Request{Handler: fmt.Sprint("h", i), Key: "k"}
		}
		res, err := db.ApplyBatch(ctx, reqs, nil)
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err)
		}
		st := db.Stats()
		require.Len(t, st.Handlers, oncekv.DefaultMaxHandlerStats)
		require.Equal(t, uint64(50), st.OtherHandlers.Applied)
		require.Equal(t, uint64(len(reqs)), st.Total.Applied)
	})
}

// TestContextEndedDuringEffectCountsAsAborted: Stats.Aborted covers a
// context that ended while the effect ran, whatever the effect returned
// (its context's error, or an error of its own); only an effect that
// failed with its context still live counts in EffectErrors.
func TestContextEndedDuringEffectCountsAsAborted(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	for i, ret := range []func(ctx context.Context) error{
		func(ctx context.Context) error { return ctx.Err() },
		func(context.Context) error { return fmt.Errorf("gateway: connection reset") },
	} {
		ctx, cancel := context.WithCancel(context.Background())
		_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: fmt.Sprint("cancelled-", i)},
			func(*oncekv.Tx) ([]byte, error) {
				cancel()
				return nil, ret(ctx)
			})
		require.Error(t, err)
	}
	_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "failed"},
		func(*oncekv.Tx) ([]byte, error) { return nil, fmt.Errorf("transient") })
	require.Error(t, err)

	st := db.Stats().Handlers["h"]
	require.Equal(t, uint64(2), st.Aborted, "the two contexts that ended during their effect")
	require.Equal(t, uint64(1), st.EffectErrors, "only the effect that failed with a live context")
	require.Zero(t, st.Applied)
}

// applyUniqueN applies n unique keys of handler, one call each, with an
// effect that overwrites one user key (so user data does not grow).
func applyUniqueN(t *testing.T, db *oncekv.DB, handler string, n int) {
	t.Helper()
	for i := range n {
		_, err := db.Apply(context.Background(), oncekv.Request{Handler: handler, Key: fmt.Sprint("k", i), Payload: []byte("p")},
			overwriteEffect)
		require.NoError(t, err)
	}
}

func overwriteEffect(tx *oncekv.Tx) ([]byte, error) {
	b, err := tx.CreateBucketIfNotExists([]byte("counter"))
	if err != nil {
		return nil, err
	}
	return []byte("ok"), b.Put([]byte("last"), []byte("value"))
}

func TestFileStatsDescribeTheFile(t *testing.T) {
	clock := oncetest.NewClock(claimEpoch)
	path := filepath.Join(t.TempDir(), "file.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, Now: clock.Now, ExpireInterval: -1, WindowSpan: time.Hour, Retention: time.Hour})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()

	f := db.Stats().File
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, fi.Size(), f.Size, "Size is the file's length")
	require.Equal(t, os.Getpagesize(), f.PageSize, "a new file takes the OS page size")
	require.Zero(t, f.OpenReadTxs)
	require.Positive(t, f.HighWater)
	require.LessOrEqual(t, f.HighWater, f.Size)

	// Fill a window, expire it: its pages go to the freelist, and the file
	// does not shrink.
	applyUniqueN(t, db, "fill", 2000)
	before := db.Stats().File
	clock.Advance(3 * time.Hour)
	exp, err := db.Expire(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 2000, exp.Marks)
	after := db.Stats().File
	require.Equal(t, before.Size, after.Size, "bbolt never shrinks a file")
	require.GreaterOrEqual(t, after.HighWater, before.HighWater)
	require.Less(t, after.FreeBytes, after.HighWater, "free pages lie below the high-water mark")
	require.Greater(t, after.FreePages+after.PendingPages, before.FreePages+before.PendingPages,
		"the expired window's pages are free for reuse")
	require.Greater(t, after.FreePages+after.PendingPages, 20)
	require.Equal(t, int64(after.FreePages+after.PendingPages)*int64(after.PageSize), after.FreeBytes)
	require.Positive(t, after.FreelistBytes)
	require.Greater(t, after.ReadTxs, before.ReadTxs)
	require.Equal(t, after.ReadTxs-before.ReadTxs, after.Sub(before).ReadTxs, "ReadTxs is the counter Sub subtracts")
	require.Equal(t, after.Size, after.Sub(before).Size, "the gauges are the newer snapshot's")
}

// TestFileStatsShowALongReadKeepingPagesPending is bbolt's classic cause of
// growth, made visible: while a read transaction is open, pages it can
// still see stay pending (not reusable) though writes freed them, and
// OpenReadTxs says why. (bbolt 1.4 frees at once the pages written and freed
// after the reader began, so only those the reader saw are held.)
func TestFileStatsShowALongReadKeepingPagesPending(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, ExpireInterval: -1})
	// Make room first: bbolt cannot remap the file while a reader is open,
	// so the writes below must fit in free pages (issue 9, item 7).
	big := make([]byte, 1<<20)
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("room"))
		if err != nil {
			return err
		}
		return b.Put([]byte("big"), big)
	}))
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error { return tx.DeleteBucket([]byte("room")) }))
	overwrite := func() error {
		return db.Update(func(tx *oncekv.Tx) error {
			_, err := overwriteEffect(tx)
			return err
		})
	}
	require.NoError(t, overwrite())
	require.Greater(t, db.Stats().File.FreePages, 200)

	inside, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- db.View(func(*oncekv.Tx) error {
			close(inside)
			<-release
			return nil
		})
	}()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	select {
	case <-inside:
	case <-time.After(10 * time.Second):
		t.Fatal("View did not start")
	}
	const writes = 50
	wrote := make(chan error, 1)
	go func() {
		var err error
		for i := 0; i < writes && err == nil; i++ {
			err = overwrite()
		}
		wrote <- err
	}()
	select {
	case err := <-wrote:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("writers blocked behind the open reader")
	}
	held := db.Stats().File
	require.Equal(t, 1, held.OpenReadTxs)
	require.Positive(t, held.PendingPages, "pages the reader may still see stay pending")

	close(release)
	require.NoError(t, <-done)
	require.NoError(t, overwrite())
	freed := db.Stats().File
	require.Zero(t, freed.OpenReadTxs)
	require.Less(t, freed.PendingPages, held.PendingPages, "once the reader is gone, pending pages become free")
	require.Greater(t, freed.FreePages, held.FreePages)
}

func TestFileStatsOfAClosedDBAreZero(t *testing.T) {
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "closed.db"), nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.Equal(t, oncekv.FileStats{}, db.Stats().File)
}

func TestCommitHistograms(t *testing.T) {
	db, _ := openClocked(t)
	ctx := context.Background()
	h0 := db.Stats().CommitHistograms

	applyUniqueN(t, db, "single", 3)
	reqs := make([]oncekv.Request, 10)
	for i := range reqs {
		reqs[i] = oncekv.Request{Handler: "batch", Key: fmt.Sprint("b", i), Payload: []byte("p")}
	}
	_, err := db.ApplyBatch(ctx, reqs, nil)
	require.NoError(t, err)
	// A duplicate commits nothing; an Update commits without a mark.
	_, err = db.Apply(ctx, oncekv.Request{Handler: "single", Key: "k0", Payload: []byte("p")}, mustNotApply(t))
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *oncekv.Tx) error {
		_, err := overwriteEffect(tx)
		return err
	}))

	st := db.Stats()
	h := st.CommitHistograms.Sub(h0)
	require.EqualValues(t, 5, h.Count, "3 applies, 1 batch, 1 update")
	require.Equal(t, st.Commits, st.CommitHistograms.Count, "Count is Stats.Commits")
	require.EqualValues(t, 4, h.MarkCommits, "the update wrote no mark")
	require.EqualValues(t, 13, h.RequestSum)
	bounds := oncekv.CommitRequestBounds()
	for i, b := range bounds {
		want := uint64(3) // the three single applies
		if b >= 10 {
			want = 4 // and the batch of 10
		}
		require.Equal(t, want, h.Requests[i], "requests bucket le=%d", b)
	}
	require.Positive(t, h.DurationSum)
	for i := 1; i < len(h.Duration); i++ {
		require.LessOrEqual(t, h.Duration[i-1], h.Duration[i], "buckets are cumulative")
	}
	require.LessOrEqual(t, h.Duration[len(h.Duration)-1], h.Count)
	require.Less(t, oncekv.CommitDurationBounds()[0], oncekv.CommitDurationBounds()[len(h.Duration)-1])

	// The bounds are copies: changing one changes nothing.
	bounds[0] = 99
	require.EqualValues(t, 1, oncekv.CommitRequestBounds()[0])
}

func TestCommitHistogramsUnderConcurrentApply(t *testing.T) {
	db, _ := openClocked(t)
	const callers, each = 8, 25
	errs := make(chan error, callers*each)
	for c := range callers {
		go func() {
			for i := range each {
				_, err := db.Apply(context.Background(), oncekv.Request{Handler: "conc", Key: fmt.Sprint(c, "/", i), Payload: []byte("p")}, nil)
				errs <- err
			}
		}()
	}
	for range callers * each {
		require.NoError(t, <-errs)
	}
	st := db.Stats()
	h := st.CommitHistograms
	require.EqualValues(t, callers*each, h.RequestSum, "every request's mark is counted once, however grouped")
	require.Equal(t, st.Commits, h.Count)
	require.LessOrEqual(t, h.MarkCommits, uint64(callers*each))
	require.Equal(t, h.MarkCommits, h.Requests[len(h.Requests)-1], "no group is over 1024")
}

func TestCommitHistogramsResetOnReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reopen.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	applyUniqueN(t, db, "h", 3)
	require.EqualValues(t, 3, db.Stats().CommitHistograms.MarkCommits)
	require.NoError(t, db.Close())

	db, err = oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.Equal(t, oncekv.CommitHistograms{}, db.Stats().CommitHistograms, "counters start again at Open, as Prometheus expects")
	require.Positive(t, db.Stats().File.Size)
}

// TestStatsInsideViewDoesNotWaitForAWriter: Stats takes no transaction, so
// a caller may ask for it inside View even while a writer waits to remap
// the file (which waits for that View to end).
func TestStatsInsideViewDoesNotWaitForAWriter(t *testing.T) {
	// Not oncetest.Open: after a deadlock, its Close would hang the suite.
	db, err := oncekv.Open(filepath.Join(t.TempDir(), "view.db"), &oncekv.Options{NoSync: true, ExpireInterval: -1})
	require.NoError(t, err)
	require.Positive(t, db.Stats().File.HighWater, "known from Open")
	inside, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 2)
	go func() {
		done <- db.View(func(*oncekv.Tx) error {
			close(inside)
			<-release
			_ = db.Stats() // the writer is waiting for this View now
			return nil
		})
	}()
	<-inside
	go func() {
		// Big enough to make the file grow, so the commit has to remap.
		done <- db.Update(func(tx *oncekv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("grow"))
			if err != nil {
				return err
			}
			return b.Put([]byte("big"), make([]byte, 8<<20))
		})
	}()
	// Give the writer time to reach the remap, where it waits for the View.
	// Only the check's power depends on this wait, never its verdict.
	wrote := false
	select {
	case err := <-done:
		require.NoError(t, err)
		wrote = true
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	for range map[bool]int{true: 1, false: 2}[wrote] {
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("Stats inside View deadlocked with a writer")
		}
	}
	require.GreaterOrEqual(t, db.Stats().File.HighWater, int64(8<<20), "read again after the commit")
	require.NoError(t, db.Close())
}

// TestReadOnlyStatsSeeFreePages: a read-only open (the operator's stats)
// reports the free pages expiry left, as the writer saw them.
func TestReadOnlyStatsSeeFreePages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "free.db")
	clock := oncetest.NewClock(claimEpoch)
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, Now: clock.Now, ExpireInterval: -1})
	require.NoError(t, err)
	for i := range 2000 {
		applyOp(t, db, "h", fmt.Sprint(i), strings.Repeat("r", 100))
	}
	advance(db, clock, oncekv.DefaultRetention+2*time.Hour)
	_, err = db.Expire(context.Background())
	require.NoError(t, err)
	applyOp(t, db, "h", "last", "ok") // a commit after the expiry's, so its freed pages are free
	free := db.Stats().File.FreePages
	require.Positive(t, free)
	require.NoError(t, db.Close())

	ro, err := oncekv.Open(path, &oncekv.Options{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	require.InDelta(t, free, ro.Stats().File.FreePages, 4) // Close's own commit may move a few
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
