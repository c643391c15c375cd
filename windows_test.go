package oncekv_test

import (
	"context"
	"fmt"
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

// TestReopenWithAnotherWindowSpanKeepsMarksForRetention: marks written
// with one WindowSpan are kept for at least Retention after they were first
// seen after a reopen with another span, whatever the store decides: keep
// the file's span, or refuse the new one with ErrInvalidOptions naming it
// (then a zero WindowSpan opens with the file's).
func TestReopenWithAnotherWindowSpanKeepsMarksForRetention(t *testing.T) {
	for _, tc := range []struct{ before, after, retention time.Duration }{
		{3 * time.Hour, time.Hour, 24 * time.Hour},
		{time.Hour, 3 * time.Hour, 24 * time.Hour},
		{30 * time.Minute, 2 * time.Hour, 12 * time.Hour},
		{2 * time.Hour, 45 * time.Minute, 10 * time.Hour},
		{10 * time.Minute, time.Hour, 5 * time.Hour},
	} {
		t.Run(fmt.Sprintf("%v-to-%v-retention-%v", tc.before, tc.after, tc.retention), func(t *testing.T) {
			ctx := context.Background()
			start := epoch.Add(11 * time.Hour)
			clock := oncetest.NewClock(start)
			path := filepath.Join(t.TempDir(), "x.db")
			db, err := oncekv.Open(path, timeOpts(clock, tc.before, tc.retention))
			require.NoError(t, err)
			// Keys first seen every 7 minutes over three old windows, each
			// one also just before an old window's end.
			seen := map[string]time.Time{}
			step := 7 * time.Minute
			for at := start; at.Before(start.Add(3 * tc.before)); at = at.Add(step) {
				for _, when := range []time.Time{at, at.Truncate(tc.before).Add(tc.before - time.Second)} {
					clock.Set(when)
					key := when.Format(time.RFC3339)
					if _, ok := seen[key]; ok {
						continue
					}
					var runs int
					_, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: key}, counted(&runs))
					require.NoError(t, err)
					require.Equal(t, 1, runs)
					seen[key] = when
				}
			}
			last := clock.Now()
			require.NoError(t, db.Close())

			db, err = oncekv.Open(path, timeOpts(clock, tc.after, tc.retention))
			if err != nil {
				require.ErrorIs(t, err, oncekv.ErrInvalidOptions)
				require.Contains(t, err.Error(), tc.before.String(), "the error says what the file's windows are")
				db, err = oncekv.Open(path, timeOpts(clock, 0, tc.retention))
				require.NoError(t, err, "a zero WindowSpan takes the file's")
			}
			defer db.Close()
			// Walk the clock until every key is past its retention; at each
			// step expire, then retry every key still within it.
			for now := last; now.Before(last.Add(tc.retention + 2*tc.before)); now = now.Add(step) {
				clock.Set(now)
				_, err := db.Expire(ctx)
				require.NoError(t, err)
				for key, first := range seen {
					if now.Sub(first) >= tc.retention {
						delete(seen, key) // may be gone now; never probe it again
						continue
					}
					var runs int
					res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: key}, counted(&runs))
					require.NoError(t, err)
					require.True(t, res.Duplicate, "key first seen at %v retried at %v (%v later) ran again",
						first.Format(time.TimeOnly), now.Format(time.TimeOnly), now.Sub(first))
					require.Zero(t, runs)
				}
			}
		})
	}
}

// TestLegacyFileWithoutStoredSpan: a file written before the span was
// stored is taken to have been made with the span it is opened with, which
// is then recorded; a span its windows are not aligned to is refused.
func TestLegacyFileWithoutStoredSpan(t *testing.T) {
	ctx := context.Background()
	clock := oncetest.NewClock(epoch.Add(13*time.Hour + 20*time.Minute))
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := oncekv.Open(path, timeOpts(clock, time.Hour, 24*time.Hour))
	require.NoError(t, err)
	applyKey(t, db, "old")
	require.NoError(t, db.Close())
	makeLegacy(t, path)

	_, err = oncekv.Open(path, timeOpts(clock, 3*time.Hour, 24*time.Hour))
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions, "a 13:00 window cannot have been made with 3h windows")
	require.Contains(t, err.Error(), "WindowSpan")

	ro := timeOpts(clock, 0, 24*time.Hour)
	ro.ReadOnly = true
	db, err = oncekv.Open(path, ro) // a version 1 file is readable as it is
	require.NoError(t, err)
	require.True(t, applyKey(t, db, "old").Duplicate)
	require.NoError(t, db.Close())
	require.Equal(t, uint32(1), fileFormat(t, path).Version, "a read-only open writes nothing")

	db, err = oncekv.Open(path, timeOpts(clock, 0, 24*time.Hour)) // the default, 1h, as before
	require.NoError(t, err)
	require.True(t, applyKey(t, db, "old").Duplicate)
	applyKey(t, db, "new")
	require.NoError(t, db.Close())
	require.Equal(t, uint32(layout.FormatVersion), fileFormat(t, path).Version, "a writable open upgrades the file")
	oncetest.Check(t, path) // which requires the filters bucket of a version 2 file

	_, err = oncekv.Open(path, timeOpts(clock, 2*time.Hour, 24*time.Hour))
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions, "the span is recorded now")
	require.Contains(t, err.Error(), "1h0m0s")
	db, err = oncekv.Open(path, timeOpts(clock, time.Hour, 24*time.Hour))
	require.NoError(t, err)
	require.True(t, applyKey(t, db, "old").Duplicate)
	require.NoError(t, db.Close())
	oncetest.Check(t, path)
	_ = ctx
}

// makeLegacy turns the closed store at path into one written by a build
// that did not store its window span: format version 1, no windows record,
// no filters bucket.
func makeLegacy(t *testing.T, path string) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(layout.MetaRoot)
		if err := meta.Delete([]byte("windows")); err != nil {
			return err
		}
		if err := tx.DeleteBucket(layout.FiltersRoot); err != nil {
			return err // version 1 files may lack it: it was created lazily
		}
		return meta.Put([]byte("format"), layout.Format{Magic: layout.FormatMagic, Version: 1, CreatedUnixNano: 1}.Marshal())
	}))
}

// fileFormat reads the format record of the closed store at path.
func fileFormat(t *testing.T, path string) layout.Format {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer b.Close()
	var f layout.Format
	require.NoError(t, b.View(func(tx *bolt.Tx) error {
		return f.Unmarshal(tx.Bucket(layout.MetaRoot).Get([]byte("format")))
	}))
	return f
}

// TestLiveClaimOutlivesRetention: a claim whose lease is longer than
// Retention keeps its key while the lease is live, whatever expiry runs and
// across a reopen: no second claim, no Apply, and the holder completes.
func TestLiveClaimOutlivesRetention(t *testing.T) {
	for _, tc := range []struct{ span, retention, lease time.Duration }{
		{time.Hour, 2 * time.Hour, 10 * time.Hour},
		{30 * time.Minute, time.Hour, 3 * time.Hour},
		{time.Hour, 24 * time.Hour, 50 * time.Hour},
		{10 * time.Minute, 30 * time.Minute, 31 * time.Minute},
	} {
		t.Run(fmt.Sprintf("span-%v-retention-%v-lease-%v", tc.span, tc.retention, tc.lease), func(t *testing.T) {
			ctx := context.Background()
			clock := oncetest.NewClock(epoch.Add(tc.span - time.Minute)) // late in its window
			path := filepath.Join(t.TempDir(), "x.db")
			opts := timeOpts(clock, tc.span, tc.retention)
			// The claim's holder is this process, alive across the reopen:
			// keep its claim instead of releasing it as an orphan.
			opts.KeepOrphanedClaims = true
			db, err := oncekv.Open(path, opts)
			require.NoError(t, err)
			held := oncekv.Request{Handler: "h", Key: "held", Payload: []byte("p")}
			orphan := oncekv.Request{Handler: "h", Key: "orphan", Payload: []byte("p")} // its holder dies with the DB
			c, err := db.Claim(ctx, held, tc.lease)
			require.NoError(t, err)
			_, err = db.Claim(ctx, orphan, tc.lease)
			require.NoError(t, err)
			end := c.LeaseUntil()
			expired := uint64(0)
			probe := func(db *oncekv.DB, now time.Time) {
				for _, req := range []oncekv.Request{held, orphan} {
					_, err := db.Claim(ctx, req, time.Minute)
					require.ErrorIs(t, err, oncekv.ErrInProgress, "%s at %v, %v before its lease ends", req.Key, now, end.Sub(now))
					_, err = db.Apply(ctx, req, mustNotRunApply(t))
					require.ErrorIs(t, err, oncekv.ErrInProgress)
				}
			}
			for now := clock.Now(); now.Before(end); now = now.Add(tc.span / 2) {
				clock.Set(now)
				applyKey(t, db, now.String()) // marks that expire around the claims
				st, err := db.Expire(ctx)
				require.NoError(t, err)
				expired += uint64(st.Windows)
				probe(db, now)
			}
			clock.Set(end.Add(-time.Nanosecond))
			_, err = db.Expire(ctx)
			require.NoError(t, err)
			probe(db, clock.Now())
			res, err := c.Complete(ctx, []byte("done"), nil)
			require.NoError(t, err, "the holder completes within its lease")
			require.Equal(t, []byte("done"), res.Response)
			require.NoError(t, db.Close())

			db, err = oncekv.Open(path, opts)
			require.NoError(t, err)
			defer db.Close()
			_, err = db.Expire(ctx)
			require.NoError(t, err)
			_, err = db.Claim(ctx, orphan, time.Minute)
			require.ErrorIs(t, err, oncekv.ErrInProgress, "after a reopen too")
			clock.Set(end)
			c2, err := db.Claim(ctx, orphan, time.Minute)
			require.NoError(t, err, "taken over once the lease has run out")
			require.False(t, c2.Done())
		})
	}
}

// TestHeartbeatClaimOutlivesRetention: a claim kept alive by short leases,
// extended before each runs out, keeps its key for as long as it is
// extended, far past Retention, and completes.
func TestHeartbeatClaimOutlivesRetention(t *testing.T) {
	for _, tc := range []struct{ span, retention, lease, beat, total time.Duration }{
		{time.Hour, 2 * time.Hour, 30 * time.Minute, 20 * time.Minute, 3 * time.Hour},
		{10 * time.Minute, time.Hour, 15 * time.Minute, 14 * time.Minute, 5 * time.Hour},
		{time.Hour, 24 * time.Hour, 2 * time.Hour, time.Hour, 60 * time.Hour},
	} {
		t.Run(fmt.Sprintf("span-%v-retention-%v-lease-%v-every-%v", tc.span, tc.retention, tc.lease, tc.beat), func(t *testing.T) {
			ctx := context.Background()
			db, clock, req, c := openClaimed(t, epoch.Add(tc.span/3), tc.span, tc.retention, tc.lease)
			began := clock.Now()
			for clock.Now().Sub(began) < tc.total {
				clock.Advance(tc.beat)
				applyKey(t, db, clock.Now().String())
				_, err := db.Expire(ctx)
				require.NoError(t, err)
				require.NoError(t, c.Extend(ctx, tc.lease), "heartbeat at +%v", clock.Now().Sub(began))
				_, err = db.Claim(ctx, req, time.Minute)
				require.ErrorIs(t, err, oncekv.ErrInProgress)
				_, err = db.Apply(ctx, req, mustNotRunApply(t))
				require.ErrorIs(t, err, oncekv.ErrInProgress)
			}
			require.NotZero(t, db.Stats().ExpiredWindows, "windows around the claim expired meanwhile")
			_, err := c.Complete(ctx, []byte("done"), nil)
			require.NoError(t, err)
		})
	}
}

// TestClaimCompletedLateStaysDeduplicated: a claim that completes long
// after it was taken leaves a DONE mark that answers duplicates for at
// least Retention after the completion.
func TestClaimCompletedLateStaysDeduplicated(t *testing.T) {
	for _, tc := range []struct{ span, retention, lease, after time.Duration }{
		{time.Hour, 2 * time.Hour, 10 * time.Hour, 9 * time.Hour},
		{time.Hour, 24 * time.Hour, 30 * time.Hour, 23 * time.Hour},
		{15 * time.Minute, time.Hour, 2 * time.Hour, 50 * time.Minute},
	} {
		t.Run(fmt.Sprintf("span-%v-retention-%v-completed-after-%v", tc.span, tc.retention, tc.after), func(t *testing.T) {
			ctx := context.Background()
			db, clock, req, c := openClaimed(t, epoch.Add(tc.span/2), tc.span, tc.retention, tc.lease)
			clock.Advance(tc.after)
			_, err := db.Expire(ctx)
			require.NoError(t, err)
			_, err = c.Complete(ctx, []byte("done"), nil)
			require.NoError(t, err)
			done := clock.Now()
			for now := done; now.Sub(done) < tc.retention; now = now.Add(tc.span / 4) {
				clock.Set(now)
				_, err := db.Expire(ctx)
				require.NoError(t, err)
				res, err := db.Apply(ctx, req, mustNotRunApply(t))
				require.NoError(t, err, "%v after completion", now.Sub(done))
				require.True(t, res.Duplicate)
				require.Equal(t, []byte("done"), res.Response)
			}
		})
	}
}

// openClaimed opens a store on a clock at start and claims key "job" in it
// for lease.
func openClaimed(t *testing.T, start time.Time, span, retention, lease time.Duration) (*oncekv.DB, *oncetest.Clock, oncekv.Request, *oncekv.Claim) {
	t.Helper()
	clock := oncetest.NewClock(start)
	db := oncetest.Open(t, timeOpts(clock, span, retention))
	req := oncekv.Request{Handler: "h", Key: "job"}
	c, err := db.Claim(context.Background(), req, lease)
	require.NoError(t, err)
	return db, clock, req, c
}

func mustNotRunApply(t *testing.T) func(*oncekv.Tx) ([]byte, error) {
	return func(*oncekv.Tx) ([]byte, error) {
		t.Error("the effect ran")
		return nil, nil
	}
}
