package oncekv_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// epoch is an instant on a window boundary for every span the tests use.
var epoch = time.Date(2026, 3, 14, 0, 0, 0, 0, time.UTC)

func windowOpts(clock *oncetest.Clock) *oncekv.Options {
	return &oncekv.Options{
		NoSync:         true,
		Now:            clock.Now,
		WindowSpan:     time.Hour,
		Retention:      24 * time.Hour,
		ExpireInterval: -1, // the tests call Expire themselves
		// The tests move the clock days at once, as if that much time had
		// passed; see TestOneFutureClockReadingDoesNotFreezeTheStore for
		// the jumps the store holds back.
		MaxClockJump: 365 * 24 * time.Hour,
	}
}

func applyKey(t testing.TB, db *oncekv.DB, key string) oncekv.Result {
	t.Helper()
	res, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: key, Payload: []byte(key)}, deposit("acct", 1))
	require.NoError(t, err)
	return res
}

func windowStarts(st oncekv.Stats) []time.Time {
	var starts []time.Time
	for _, w := range st.Windows {
		starts = append(starts, w.Start.UTC())
	}
	return starts
}

func TestMarksGoIntoTheWindowOfTheirFirstSighting(t *testing.T) {
	clock := oncetest.NewClock(epoch.Add(10 * time.Minute))
	db := oncetest.Open(t, windowOpts(clock))

	applyKey(t, db, "a")
	applyKey(t, db, "b")
	clock.Advance(time.Hour) // 01:10
	applyKey(t, db, "c")
	require.True(t, applyKey(t, db, "a").Duplicate, "a duplicate is found in an older window")
	clock.Set(epoch.Add(3*time.Hour - time.Nanosecond)) // 02:59:59.999999999, still the third hour
	applyKey(t, db, "d")
	clock.Set(epoch.Add(3 * time.Hour)) // exactly on the boundary: a new window
	applyKey(t, db, "e")

	st := db.Stats()
	require.Equal(t, []time.Time{epoch, epoch.Add(time.Hour), epoch.Add(2 * time.Hour), epoch.Add(3 * time.Hour)}, windowStarts(st))
	marks := []uint64{}
	for _, w := range st.Windows {
		marks = append(marks, w.Marks)
		require.Equal(t, time.Hour, w.End.Sub(w.Start))
		require.Positive(t, w.FilterBytes)
	}
	require.Equal(t, []uint64{2, 1, 1, 1}, marks)
	require.Equal(t, uint64(5), st.LiveMarks)
	require.Equal(t, 3*time.Hour, st.OldestMarkAge)
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		require.True(t, applyKey(t, db, k).Duplicate, k)
	}
}

func TestExpiryDropsWindowsPastRetentionAndAppliesRetriesAgain(t *testing.T) {
	clock := oncetest.NewClock(epoch)
	db := oncetest.Open(t, windowOpts(clock))
	ctx := context.Background()

	applyKey(t, db, "early") // window [00:00, 01:00)
	clock.Advance(2 * time.Hour)
	applyKey(t, db, "later") // window [02:00, 03:00)

	// Deduplicated for at least the retention: at 01:00 + 24h - 1ns the
	// window of "early" is still live.
	clock.Set(epoch.Add(25*time.Hour - time.Nanosecond))
	st, err := db.Expire(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Windows)
	require.True(t, applyKey(t, db, "early").Duplicate)

	clock.Set(epoch.Add(25 * time.Hour))
	st, err = db.Expire(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Windows)
	require.Equal(t, uint64(1), st.Marks)
	require.False(t, applyKey(t, db, "early").Duplicate, "past the window a retry is applied again")
	require.True(t, applyKey(t, db, "later").Duplicate)
	require.Equal(t, uint64(3), balance(t, db, "acct"))

	total := db.Stats()
	require.Equal(t, uint64(1), total.ExpiredWindows)
	require.Equal(t, uint64(1), total.ExpiredMarks)

	st, err = db.Expire(ctx)
	require.NoError(t, err)
	require.Equal(t, oncekv.ExpireStats{Steps: 0}, oncekv.ExpireStats{Steps: st.Steps, Windows: st.Windows, Marks: st.Marks}, "nothing left to expire")
}

func TestExpiryWorksInBoundedSteps(t *testing.T) {
	clock := oncetest.NewClock(epoch)
	opts := windowOpts(clock)
	opts.ExpireStep = 7
	db := oncetest.Open(t, opts)
	ctx := context.Background()
	reqs := make([]oncekv.Request, 100)
	for i := range reqs {
		reqs[i] = oncekv.Request{Handler: "h", Key: fmt.Sprint("k", i)}
	}
	_, err := db.ApplyBatch(ctx, reqs, nil)
	require.NoError(t, err)

	clock.Advance(48 * time.Hour)
	st, err := db.Expire(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Windows)
	require.Equal(t, uint64(100), st.Marks)
	require.Equal(t, 1+15, st.Steps, "one step to drop the window, then 100 marks 7 at a time")
	require.Positive(t, st.LongestStep)
	require.Empty(t, db.Stats().Windows)
}

func TestExpiryInterruptedIsFinishedLater(t *testing.T) {
	clock := oncetest.NewClock(epoch)
	opts := windowOpts(clock)
	opts.ExpireStep = 10
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	for i := range 50 {
		applyKey(t, db, fmt.Sprint("k", i))
	}
	clock.Advance(48 * time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = db.Expire(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, db.Stats().Windows, "the window stops answering at once")
	require.False(t, applyKey(t, db, "k1").Duplicate)
	require.NoError(t, db.Close())

	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	defer db.Close()
	require.Len(t, db.Stats().Windows, 1, "only the window of the re-applied k1")
	st, err := db.Expire(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, st.Windows)
	require.Equal(t, uint64(50), st.Marks)
	require.True(t, applyKey(t, db, "k1").Duplicate)
}

func TestClockJumpingBackwards(t *testing.T) {
	clock := oncetest.NewClock(epoch.Add(30 * time.Hour))
	db := oncetest.Open(t, windowOpts(clock))
	ctx := context.Background()

	applyKey(t, db, "now")
	clock.Advance(-10 * time.Hour) // NTP steps the clock back
	applyKey(t, db, "after-jump")
	st := db.Stats()
	require.Equal(t, []time.Time{epoch.Add(30 * time.Hour)}, windowStarts(st),
		"a new mark never goes into a window older than the newest")

	// Expiry by a clock that went back drops nothing early.
	exp, err := db.Expire(ctx)
	require.NoError(t, err)
	require.Zero(t, exp.Windows)
	require.True(t, applyKey(t, db, "now").Duplicate)

	// Once everything has expired, a clock far behind must not recreate an
	// expired window.
	clock.Set(epoch.Add(100 * time.Hour))
	exp, err = db.Expire(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, exp.Windows)
	clock.Set(epoch.Add(20 * time.Hour))
	applyKey(t, db, "old-clock")
	st = db.Stats()
	require.Len(t, st.Windows, 1)
	require.False(t, st.Windows[0].Start.Before(epoch.Add(31*time.Hour)),
		"placed at or after the expiry floor, got %v", st.Windows[0].Start)
	exp, err = db.Expire(ctx)
	require.NoError(t, err)
	require.Zero(t, exp.Windows, "the fresh mark is not expired at once")
	require.True(t, applyKey(t, db, "old-clock").Duplicate)
}

func TestForget(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	applyKey(t, db, "k")
	require.NoError(t, db.Forget("h", "k"))
	require.Zero(t, db.Stats().LiveMarks)
	require.False(t, applyKey(t, db, "k").Duplicate, "a forgotten key is applied again")
	require.Equal(t, uint64(2), balance(t, db, "acct"))
	require.NoError(t, db.Forget("h", "never-seen"))
	require.ErrorIs(t, db.Forget("", "k"), oncekv.ErrHandlerRequired)
	require.ErrorIs(t, db.Forget("h", ""), oncekv.ErrKeyRequired)
	require.True(t, applyKey(t, db, "k").Duplicate)

	// A key under a live claim stays: its holder is still working on it.
	c, err := db.Claim(context.Background(), oncekv.Request{Handler: "h", Key: "claimed"}, time.Minute)
	require.NoError(t, err)
	require.ErrorIs(t, db.Forget("h", "claimed"), oncekv.ErrInProgress)
	_, err = c.Complete(context.Background(), []byte("done"), nil)
	require.NoError(t, err, "the holder is not disturbed by the refused Forget")
}

// TestReopenLoadsSealedFiltersAndRebuildsTheRest checks that a reopened store
// answers exactly as before: filters persisted for sealed windows, the
// newest one rebuilt, and a damaged persisted filter rebuilt too.
func TestReopenLoadsSealedFiltersAndRebuildsTheRest(t *testing.T) {
	clock := oncetest.NewClock(epoch)
	opts := windowOpts(clock)
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	var keys []string
	for hour := range 5 {
		for i := range 300 {
			k := fmt.Sprintf("h%d-%d", hour, i)
			keys = append(keys, k)
			applyKey(t, db, k)
		}
		clock.Advance(time.Hour)
	}
	before := db.Stats()
	require.NoError(t, db.Close())

	probe := func(db *oncekv.DB) oncekv.Stats {
		start := db.Stats()
		for _, k := range keys {
			require.True(t, applyKey(t, db, k).Duplicate, k)
		}
		for i := range 2000 {
			res, err := db.Apply(context.Background(), oncekv.Request{Handler: "probe", Key: fmt.Sprint(i)}, nil)
			require.NoError(t, err)
			require.False(t, res.Duplicate)
		}
		return db.Stats().Sub(start)
	}

	// A copy with every persisted filter damaged: Open must rebuild them,
	// not trust them.
	damaged := filepath.Join(t.TempDir(), "damaged.db")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(damaged, raw, 0o600))
	b, err := bolt.Open(damaged, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		f := tx.Bucket(layout.FiltersRoot)
		n := 0
		require.NoError(t, f.ForEach(func(k, v []byte) error {
			n++
			v = append([]byte(nil), v...)
			v[len(v)/2] ^= 0xff
			return f.Put(append([]byte(nil), k...), v)
		}))
		require.Equal(t, 4, n, "the four sealed windows have persisted filters")
		return nil
	}))
	require.NoError(t, b.Close())

	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	require.Equal(t, before.Windows, db.Stats().Windows, "same windows, marks and filter sizes after reopen")
	loaded := probe(db)
	require.NoError(t, db.Close())
	oncetest.Check(t, path)

	db, err = oncekv.Open(damaged, opts)
	require.NoError(t, err)
	rebuilt := probe(db)
	require.NoError(t, db.Close())

	require.Positive(t, loaded.BloomNegatives)
	require.Less(t, float64(loaded.BloomFalsePositives), 0.03*float64(loaded.BloomNegatives+loaded.BloomFalsePositives))
	require.InDelta(t, float64(loaded.BloomNegatives), float64(rebuilt.BloomNegatives), 0.02*float64(loaded.BloomNegatives),
		"persisted and rebuilt filters rule out about as many look-ups")
}

func TestFiltersDisabledStayCorrect(t *testing.T) {
	clock := oncetest.NewClock(epoch)
	opts := windowOpts(clock)
	opts.BloomFalsePositiveRate = -1
	db := oncetest.Open(t, opts)
	for hour := range 3 {
		applyKey(t, db, fmt.Sprint("k", hour))
		clock.Advance(time.Hour)
	}
	for hour := range 3 {
		require.True(t, applyKey(t, db, fmt.Sprint("k", hour)).Duplicate)
	}
	st := db.Stats()
	require.Zero(t, st.BloomNegatives)
	for _, w := range st.Windows {
		require.Zero(t, w.FilterBytes)
	}
}

func TestWindowOptionsValidation(t *testing.T) {
	for name, opts := range map[string]*oncekv.Options{
		"retention below span": {WindowSpan: time.Hour, Retention: time.Minute},
		"negative span":        {WindowSpan: -time.Hour},
		"rate too high":        {BloomFalsePositiveRate: 0.5},
		"negative step":        {ExpireStep: -1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := oncekv.Open(filepath.Join(t.TempDir(), "x.db"), opts)
			require.ErrorIs(t, err, oncekv.ErrInvalidOptions)
		})
	}
}

// TestClockSteppedBackAcrossRestartRevivesNoLease: a lease that had run out
// stays run out after a restart on a clock that was stepped back, because
// Close saves the store's latest clock reading and Open resumes from it.
func TestClockSteppedBackAcrossRestartRevivesNoLease(t *testing.T) {
	clock := oncetest.NewClock(epoch.Add(10 * time.Hour))
	opts := windowOpts(clock)
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	req := oncekv.Request{Handler: "h", Key: "job"}
	_, err = db.Claim(context.Background(), req, time.Minute) // the worker then crashes
	require.NoError(t, err)
	clock.Advance(30 * time.Minute) // the lease has long run out
	require.NoError(t, db.Close())

	clock.Set(epoch.Add(10*time.Hour + 15*time.Second)) // stepped back to inside the old lease
	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	defer db.Close()
	res, err := db.Apply(context.Background(), req, nil)
	require.NoError(t, err, "the expired claim must be taken over, not reported as in progress")
	require.False(t, res.Duplicate)
}
