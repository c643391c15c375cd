package oncekv_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// timeOpts are the options of the tests of this file: a fake clock, no
// background expiry, sync off.
func timeOpts(clock *oncetest.Clock, span, retention time.Duration) *oncekv.Options {
	return &oncekv.Options{NoSync: true, Now: clock.Now, WindowSpan: span, Retention: retention, ExpireInterval: -1}
}

// counted is an effect that counts its runs in *n.
func counted(n *int) func(*oncekv.Tx) ([]byte, error) {
	return func(*oncekv.Tx) ([]byte, error) { *n++; return []byte("ok"), nil }
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

// TestFiltersBucketIsChecked: a new file has the filters bucket from the
// start, and a current-format file without it is corrupt: Open says so,
// naming the bucket, and writes nothing.
func TestFiltersBucketIsChecked(t *testing.T) {
	clock := oncetest.NewClock(epoch)
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := oncekv.Open(path, timeOpts(clock, time.Hour, 24*time.Hour))
	require.NoError(t, err)
	require.NoError(t, db.Close())

	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		require.NotNil(t, tx.Bucket(layout.FiltersRoot), "created with the file")
		return tx.DeleteBucket(layout.FiltersRoot)
	}))
	require.NoError(t, b.Close())

	_, err = oncekv.Open(path, timeOpts(clock, time.Hour, 24*time.Hour))
	require.ErrorIs(t, err, oncekv.ErrCorrupt)
	require.Contains(t, err.Error(), "oncekv.filters")
	require.Equal(t, uint32(layout.FormatVersion), fileFormat(t, path).Version)
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

// TestOneFutureClockReadingDoesNotFreezeTheStore: one clock reading far
// ahead (a bad NTP answer, a VM glitch), then the clock comes back. Leases
// taken afterwards still run out on time, expiry still drops old windows,
// and neither changes across a restart.
func TestOneFutureClockReadingDoesNotFreezeTheStore(t *testing.T) {
	for _, tc := range []struct{ jump, lease time.Duration }{
		{50 * 365 * 24 * time.Hour, time.Minute},
		{365 * 24 * time.Hour, 10 * time.Second},
		{10 * 24 * time.Hour, time.Hour},
	} {
		t.Run(fmt.Sprintf("jump-%v-lease-%v", tc.jump, tc.lease), func(t *testing.T) {
			ctx := context.Background()
			const span, retention = time.Hour, 24 * time.Hour
			clock := oncetest.NewClock(epoch.Add(9 * time.Hour))
			path := filepath.Join(t.TempDir(), "x.db")
			opts := timeOpts(clock, span, retention)
			var logged lockedBuffer
			opts.Logger = slog.New(slog.NewTextHandler(&logged, nil))
			db, err := oncekv.Open(path, opts)
			require.NoError(t, err)
			applyKey(t, db, "before")

			clock.Advance(tc.jump) // one bad reading...
			applyKey(t, db, "glitch")
			clock.Advance(-tc.jump) // ...and the clock is right again
			clock.Advance(time.Minute)
			require.Equal(t, uint64(1), db.Stats().ClockJumps)
			require.Contains(t, logged.String(), "level=WARN msg=\"clock jumped forward")

			for round := range 2 { // before and after a restart
				req := oncekv.Request{Handler: "h", Key: fmt.Sprint("job", round)}
				c, err := db.Claim(ctx, req, tc.lease)
				require.NoError(t, err)
				require.WithinDuration(t, clock.Now().Add(tc.lease), c.LeaseUntil(), span,
					"a lease counts from the clock, not from the bad reading")
				clock.Advance(tc.lease + time.Second)
				c2, err := db.Claim(ctx, req, tc.lease)
				require.NoError(t, err, "the lease has run out")
				require.Greater(t, c2.Token(), c.Token())
				require.NoError(t, db.Close())
				db, err = oncekv.Open(path, opts)
				require.NoError(t, err)
			}
			clock.Advance(retention + 2*span)
			st, err := db.Expire(ctx)
			require.NoError(t, err)
			require.NotZero(t, st.Windows, "expiry still runs")
			require.False(t, applyKey(t, db, "before").Duplicate, "past the retention, applied again")
			for _, w := range db.Stats().Windows {
				require.True(t, w.Start.Before(clock.Now()), "no window opened in the future: %v", w.Start)
			}
			require.NoError(t, db.Close())
		})
	}
}

// lockedBuffer is a bytes.Buffer for a logger, safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// clockChildEnv tells a re-executed test binary to run clockChild.
const clockChildEnv = "ONCEKV_CLOCK_CHILD_DB"

// clockStart is where the clock child's clock starts.
var clockStart = epoch.Add(9 * time.Hour)

// TestClockHighWaterSurvivesSIGKILL: a child claims a key, its clock moves
// past the lease's end, it writes something else and is killed with
// SIGKILL. Reopened on a clock stepped back to inside the old lease, the
// store does not revive the lease: the key is taken over at once.
func TestClockHighWaterSurvivesSIGKILL(t *testing.T) {
	if isChild(clockChildEnv, clockChild) {
		return
	}
	needChildren(t)
	for _, tc := range []struct{ lease, past, back time.Duration }{
		{time.Minute, 29 * time.Minute, 30 * time.Second},
		{10 * time.Second, 5 * time.Second, 9 * time.Second},
		{2 * time.Hour, 3 * time.Hour, time.Hour},
	} {
		t.Run(fmt.Sprintf("lease-%v-seen-expired-%v-later-back-to-%v", tc.lease, tc.past, tc.back), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.db")
			spec := fmt.Sprintf("%s|%d|%d", path, tc.lease, tc.past)
			child, lines := startChild(t, "^TestClockHighWaterSurvivesSIGKILL$", clockChildEnv, spec)
			require.True(t, lines.Scan(), "the child said nothing")
			require.Equal(t, "READY", lines.Text())
			require.NoError(t, child.kill(nil))

			clock := oncetest.NewClock(clockStart.Add(tc.back)) // stepped back to inside the old lease
			db, err := oncekv.Open(path, timeOpts(clock, time.Hour, 24*time.Hour))
			require.NoError(t, err)
			defer db.Close()
			c, err := db.Claim(context.Background(), oncekv.Request{Handler: "h", Key: "job"}, time.Minute)
			require.NoError(t, err, "the lease had run out before the crash")
			require.Greater(t, c.Token(), uint64(1))
		})
	}
}

// clockChild claims "job" at clockStart for a lease, moves its clock past
// the lease's end, applies another key, says READY and waits to be killed.
func clockChild(spec string) {
	parts := strings.Split(spec, "|")
	lease, _ := strconv.ParseInt(parts[1], 10, 64)
	past, _ := strconv.ParseInt(parts[2], 10, 64)
	clock := oncetest.NewClock(clockStart)
	db, err := oncekv.Open(parts[0], timeOpts(clock, time.Hour, 24*time.Hour))
	if err == nil {
		_, err = db.Claim(context.Background(), oncekv.Request{Handler: "h", Key: "job"}, time.Duration(lease))
	}
	if err == nil {
		clock.Advance(time.Duration(lease + past))
		_, err = db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "later"}, nil)
	}
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Println("READY")
	select {}
}

// TestWindowCountIsBounded: Retention/WindowSpan above the documented
// maximum is refused with ErrInvalidOptions naming both fields, also when
// the span comes from the file.
func TestWindowCountIsBounded(t *testing.T) {
	for _, tc := range []struct {
		span, retention time.Duration
		ok              bool
	}{
		{time.Second, 7 * 24 * time.Hour, false},
		{time.Minute, 7 * 24 * time.Hour, false},
		{2 * time.Minute, 24 * time.Hour, true},
		{time.Minute, 24 * time.Hour, false},
		{time.Hour, 365 * 24 * time.Hour, false},
		{time.Hour, 42 * 24 * time.Hour, true},
		{time.Hour, 43 * 24 * time.Hour, false},
		{10 * time.Minute, 7 * 24 * time.Hour, true},
	} {
		t.Run(fmt.Sprintf("span-%v-retention-%v", tc.span, tc.retention), func(t *testing.T) {
			clock := oncetest.NewClock(epoch)
			_, err := oncekv.Open(filepath.Join(t.TempDir(), "x.db"), timeOpts(clock, tc.span, tc.retention))
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, oncekv.ErrInvalidOptions)
			for _, want := range []string{"Retention", "WindowSpan", strconv.Itoa(oncekv.MaxWindows)} {
				require.Contains(t, err.Error(), want)
			}
		})
	}
	clock := oncetest.NewClock(epoch)
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := oncekv.Open(path, timeOpts(clock, time.Minute, time.Hour))
	require.NoError(t, err)
	require.NoError(t, db.Close())
	_, err = oncekv.Open(path, timeOpts(clock, 0, 30*24*time.Hour))
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions, "the file's 1m windows over 30 days are too many")
	require.Contains(t, err.Error(), "WindowSpan")
}

// TestClockJumpConfirmedByAgreeingReadings: a forward jump over
// MaxClockJump that is real (the clock stays there) is taken once three
// readings agree on it, and counted once.
func TestClockJumpConfirmedByAgreeingReadings(t *testing.T) {
	for _, jump := range []time.Duration{25 * time.Hour, 30 * 24 * time.Hour} {
		t.Run(jump.String(), func(t *testing.T) {
			ctx := context.Background()
			clock := oncetest.NewClock(epoch.Add(9 * time.Hour))
			db := oncetest.Open(t, timeOpts(clock, time.Hour, 7*24*time.Hour))
			applyKey(t, db, "before")
			before := clock.Now()
			clock.Advance(jump)
			var firsts []time.Time
			for i := range 4 {
				res := applyKey(t, db, fmt.Sprint("after", i)) // one reading each
				firsts = append(firsts, res.FirstSeen)
			}
			require.True(t, firsts[0].Equal(before), "held back: %v", firsts[0])
			require.True(t, firsts[1].Equal(before), "held back: %v", firsts[1])
			require.True(t, firsts[3].Equal(clock.Now()), "taken after three agreeing readings: %v", firsts[3])
			require.Equal(t, uint64(1), db.Stats().ClockJumps)
			c, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "job"}, time.Minute)
			require.NoError(t, err)
			require.True(t, c.LeaseUntil().Equal(clock.Now().Add(time.Minute)))
		})
	}
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

// TestWildClockReadingsUnderConcurrency: a clock that answers 50 years
// ahead on every 7th reading, read by concurrent claims: no lease ends
// later than its length after the real time, no window opens in the
// future, and the wild readings are counted.
func TestWildClockReadingsUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	clock := oncetest.NewClock(epoch.Add(9 * time.Hour))
	var readings atomic.Uint64
	wild := func() time.Time {
		if readings.Add(1)%7 == 0 {
			return clock.Now().Add(50 * 365 * 24 * time.Hour)
		}
		return clock.Now()
	}
	opts := timeOpts(clock, time.Hour, 24*time.Hour)
	opts.Now = wild
	db := oncetest.Open(t, opts)
	const lease = time.Minute
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				c, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: fmt.Sprint(g, "-", i)}, lease)
				if !assert.NoError(t, err) {
					return
				}
				assert.False(t, c.LeaseUntil().After(clock.Now().Add(lease)), "lease until %v", c.LeaseUntil())
				if i%10 == 0 {
					clock.Advance(time.Second)
				}
			}
		})
	}
	wg.Wait()
	require.NotZero(t, db.Stats().ClockJumps)
	for _, w := range db.Stats().Windows {
		require.False(t, w.Start.After(clock.Now()), "window opened in the future: %v", w.Start)
	}
}
