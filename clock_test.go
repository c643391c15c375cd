package oncekv_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
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
			for range 2 { // steps under MaxClockJump, each read: time passing, not a jump
				clock.Advance(retention/2 + span)
				db.Now()
			}
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

// TestNowIsTheStoresClock: DB.Now is Options.Now, and never goes back.
func TestNowIsTheStoresClock(t *testing.T) {
	db, clock := openClocked(t)
	require.Equal(t, claimEpoch, db.Now())
	clock.Advance(time.Minute)
	require.Equal(t, claimEpoch.Add(time.Minute), db.Now())
	clock.Advance(-time.Hour) // NTP steps the clock back
	require.Equal(t, claimEpoch.Add(time.Minute), db.Now(), "a step back is not seen")
	clock.Advance(time.Hour + time.Second)
	require.Equal(t, claimEpoch.Add(time.Minute+time.Second), db.Now())
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

// TestFirstReadingAfterOpenIsCheckedForJumps: Open anchors the store's
// clock, so a far-future reading by the first call after Open (a fresh
// store's first Apply, or the first after a restart) is a jump held back
// like any other, not the time the store saves and issues leases from.
func TestFirstReadingAfterOpenIsCheckedForJumps(t *testing.T) {
	for _, fresh := range []bool{true, false} {
		t.Run(fmt.Sprintf("fresh-%v", fresh), func(t *testing.T) {
			ctx := context.Background()
			const span, retention, jump = time.Hour, 24 * time.Hour, 50 * 365 * 24 * time.Hour
			clock := oncetest.NewClock(epoch.Add(9 * time.Hour))
			path := filepath.Join(t.TempDir(), "x.db")
			opts := timeOpts(clock, span, retention)
			if !fresh {
				db, err := oncekv.Open(path, opts)
				require.NoError(t, err)
				applyKey(t, db, "before")
				require.NoError(t, db.Close())
				clock.Advance(time.Hour)
			}
			db, err := oncekv.Open(path, opts)
			require.NoError(t, err)
			clock.Advance(jump) // the first reading after Open is a glitch...
			applyKey(t, db, "glitch")
			clock.Advance(-jump) // ...and the clock is right again
			require.Equal(t, uint64(1), db.Stats().ClockJumps, "the first reading is checked against Open's")

			req := oncekv.Request{Handler: "h", Key: "job"}
			c, err := db.Claim(ctx, req, time.Minute)
			require.NoError(t, err)
			require.WithinDuration(t, clock.Now().Add(time.Minute), c.LeaseUntil(), time.Second,
				"a lease counts from the clock, not from the bad reading")
			require.NoError(t, db.Close())

			db, err = oncekv.Open(path, opts) // what the file saved is the true time too
			require.NoError(t, err)
			defer db.Close()
			require.WithinDuration(t, clock.Now(), db.Now(), time.Second)
			clock.Advance(2 * time.Minute)
			c2, err := db.Claim(ctx, req, time.Minute)
			require.NoError(t, err, "the lease has run out after its minute")
			require.Greater(t, c2.Token(), c.Token())
			for _, w := range db.Stats().Windows {
				require.True(t, w.Start.Before(clock.Now()), "no window opened in the future: %v", w.Start)
			}
			require.True(t, applyKey(t, db, "glitch").Duplicate)
		})
	}
}
