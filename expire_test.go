package oncekv_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

func TestExpireDueIsExpiresPlan(t *testing.T) {
	db, clock := openClocked(t)
	applyOp(t, db, "h", "old-1", "ok")
	applyOp(t, db, "h", "old-2", "ok")
	clock.Advance(2 * time.Hour)
	applyOp(t, db, "h", "new", "ok")
	due, err := db.ExpireDue()
	require.NoError(t, err)
	require.Empty(t, due)

	advance(db, clock, oncekv.DefaultRetention-time.Hour) // the first window's end is Retention ago
	due, err = db.ExpireDue()
	require.NoError(t, err)
	require.Len(t, due, 1)
	require.EqualValues(t, 2, due[0].Marks)
	require.Equal(t, db.Stats().Windows[0].Start, due[0].Start)
	_, err = db.Mark("h", "old-1")
	require.NoError(t, err, "a dry run dropped a mark")

	st, err := db.Expire(context.Background())
	require.NoError(t, err)
	require.Equal(t, len(due), st.Windows)
	require.Equal(t, due[0].Marks, st.Marks)
	_, err = db.Mark("h", "old-1")
	require.ErrorIs(t, err, oncekv.ErrNotFound)
}

// TestExpireDueKeepsLiveClaim: a window with a live lease is not due, as
// Expire keeps it.
func TestExpireDueKeepsLiveClaim(t *testing.T) {
	db, clock := openClocked(t)
	_, err := db.Claim(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, 30*24*time.Hour)
	require.NoError(t, err)
	advance(db, clock, oncekv.DefaultRetention+2*time.Hour)
	require.Equal(t, claimEpoch.Add(oncekv.DefaultRetention+2*time.Hour), db.Now())
	due, err := db.ExpireDue()
	require.NoError(t, err)
	require.Empty(t, due)
	st, err := db.Expire(context.Background())
	require.NoError(t, err)
	require.Zero(t, st.Windows)
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

// TestRetentionChangeAtReopen: the Retention in force decides expiry, but
// a claim taken under a longer one keeps its mark until its lease ends.
func TestRetentionChangeAtReopen(t *testing.T) {
	for _, tc := range []struct{ before, after, lease time.Duration }{
		{24 * time.Hour, 2 * time.Hour, 20 * time.Hour},
		{12 * time.Hour, time.Hour, 6 * time.Hour},
	} {
		t.Run(fmt.Sprintf("%v-to-%v-lease-%v", tc.before, tc.after, tc.lease), func(t *testing.T) {
			ctx := context.Background()
			clock := oncetest.NewClock(epoch.Add(30 * time.Minute))
			path := filepath.Join(t.TempDir(), "x.db")
			before := timeOpts(clock, time.Hour, tc.before)
			before.KeepOrphanedClaims = true // the holder lives on across the reopen
			db, err := oncekv.Open(path, before)
			require.NoError(t, err)
			req := oncekv.Request{Handler: "h", Key: "job"}
			c, err := db.Claim(ctx, req, tc.lease)
			require.NoError(t, err)
			end := c.LeaseUntil()
			require.NoError(t, db.Close())

			after := timeOpts(clock, 0, tc.after)
			after.KeepOrphanedClaims = true
			db, err = oncekv.Open(path, after)
			require.NoError(t, err)
			defer db.Close()
			for now := clock.Now(); now.Before(end); now = now.Add(30 * time.Minute) {
				clock.Set(now)
				applyKey(t, db, now.String())
				_, err := db.Expire(ctx)
				require.NoError(t, err)
				_, err = db.Claim(ctx, req, time.Minute)
				require.ErrorIs(t, err, oncekv.ErrInProgress, "%v before the lease ends", end.Sub(now))
			}
			clock.Set(end.Add(tc.after + time.Hour))
			st, err := db.Expire(ctx)
			require.NoError(t, err)
			require.NotZero(t, st.Windows, "once the lease is over, the shorter retention is in force")
			_, err = db.Claim(ctx, req, time.Minute)
			require.NoError(t, err)
		})
	}
}
