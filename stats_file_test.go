package oncekv_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

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
