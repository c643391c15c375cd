package oncekv_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// TestRewindClockUndoesAFutureClock: a store whose clock took a jump 50
// years ahead (confirmed by agreeing readings, so saved in the file) keeps
// that time across restarts: a new claim's lease would last 50 years and
// nothing would expire. RewindClock brings it back to the true time with
// every mark still deduplicated (none lost, no false "unseen" from a filter
// of a window the marks moved into), glitched leases ended, and expiry
// working again.
func TestRewindClockUndoesAFutureClock(t *testing.T) {
	for _, tc := range []struct {
		name string
		back time.Duration // where the true time is, from the first reading
	}{
		{"into-a-sealed-window", time.Minute},
		{"into-a-new-window", 3 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			const span, retention, jump = time.Hour, 24 * time.Hour, 50 * 365 * 24 * time.Hour
			start := epoch.Add(9 * time.Hour)
			clock := oncetest.NewClock(start)
			path := filepath.Join(t.TempDir(), "x.db")
			opts := timeOpts(clock, span, retention)
			opts.KeepOrphanedClaims = true // so only the rewind can end the glitched lease
			db, err := oncekv.Open(path, opts)
			require.NoError(t, err)
			applyKey(t, db, "before")

			clock.Advance(jump)
			for range 3 { // agreeing readings: the store takes the jump
				db.Now()
			}
			require.WithinDuration(t, clock.Now(), db.Now(), time.Second)
			for _, k := range []string{"glitch-a", "glitch-b", "glitch-c"} {
				applyKey(t, db, k)
			}
			job := oncekv.Request{Handler: "h", Key: "job"}
			_, err = db.Claim(ctx, job, time.Minute)
			require.NoError(t, err)
			require.NoError(t, db.Close())

			clock.Set(start.Add(tc.back)) // the true time
			db, err = oncekv.Open(path, opts)
			require.NoError(t, err)
			require.True(t, db.Now().After(clock.Now().Add(jump/2)), "the file holds the future time")
			require.NoError(t, db.Close())

			st, err := oncekv.RewindClock(path, clock.Now(), opts)
			require.NoError(t, err)
			require.Equal(t, 1, st.Windows)
			require.Equal(t, 4, st.Marks)
			require.Equal(t, 1, st.Leases)
			require.True(t, st.To.Equal(clock.Now()))
			require.True(t, st.From.After(st.To.Add(jump/2)))
			oncetest.Check(t, path)

			db, err = oncekv.Open(path, opts)
			require.NoError(t, err)
			defer func() { require.NoError(t, db.Close()) }()
			require.WithinDuration(t, clock.Now(), db.Now(), time.Second)
			for _, k := range []string{"before", "glitch-a", "glitch-b", "glitch-c"} {
				require.True(t, applyKey(t, db, k).Duplicate, "%s is still deduplicated", k)
			}
			c, err := db.Claim(ctx, job, time.Minute)
			require.NoError(t, err, "the glitched lease has ended")
			require.WithinDuration(t, clock.Now().Add(time.Minute), c.LeaseUntil(), time.Second)
			for _, w := range db.Stats().Windows {
				require.False(t, w.Start.After(clock.Now()), "no window in the future: %v", w.Start)
			}

			clock.Advance(span) // a new window seals the one the marks moved into
			applyKey(t, db, "next")
			require.NoError(t, db.Close())
			db, err = oncekv.Open(path, opts)
			require.NoError(t, err)
			for _, k := range []string{"before", "glitch-a", "glitch-b", "glitch-c", "next"} {
				require.True(t, applyKey(t, db, k).Duplicate, "%s is still deduplicated after the seal", k)
			}

			for range 4 { // time passes, read often: no jump
				clock.Advance(retention/4 + span)
				db.Now()
			}
			exp, err := db.Expire(ctx)
			require.NoError(t, err)
			require.NotZero(t, exp.Windows, "expiry works again")
			require.False(t, applyKey(t, db, "glitch-a").Duplicate, "past the retention, applied again")
		})
	}
}

// TestRewindClockBadInput: every refusal is typed, names the path where
// there is one, and leaves the file as it was.
func TestRewindClockBadInput(t *testing.T) {
	clock := oncetest.NewClock(epoch)
	dir := t.TempDir()
	path := filepath.Join(dir, "x.db")
	db, err := oncekv.Open(path, timeOpts(clock, time.Hour, 24*time.Hour))
	require.NoError(t, err)
	applyKey(t, db, "k")

	_, err = oncekv.RewindClock(path, clock.Now(), &oncekv.Options{OpenTimeout: 50 * time.Millisecond})
	require.ErrorIs(t, err, oncekv.ErrLocked, "the store is open")
	require.ErrorContains(t, err, path)
	require.NoError(t, db.Close())
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	_, err = oncekv.RewindClock(path, time.Time{}, nil)
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions)
	_, err = oncekv.RewindClock(path, clock.Now(), &oncekv.Options{ReadOnly: true})
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions)
	_, err = oncekv.RewindClock(filepath.Join(dir, "missing.db"), clock.Now(), nil)
	require.True(t, errors.Is(err, fs.ErrNotExist), "%v", err)
	_, err = os.Stat(filepath.Join(dir, "missing.db"))
	require.True(t, errors.Is(err, fs.ErrNotExist), "nothing created")
	foreign := filepath.Join(dir, "foreign")
	require.NoError(t, os.WriteFile(foreign, []byte("not a database at all, just some bytes"), 0o600))
	_, err = oncekv.RewindClock(foreign, clock.Now(), nil)
	require.ErrorIs(t, err, oncekv.ErrNotOncekv)

	st, err := oncekv.RewindClock(path, clock.Now().Add(time.Hour), nil)
	require.NoError(t, err, "a store not ahead of the time is left alone")
	require.Zero(t, st.Windows)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.Equal(before, after), "the refused and the no-op calls changed nothing")
}

// TestRewindClockKeepsParkedKeys: a key parked while the clock was in the
// future moves with its index entry, so after the rewind it is still
// listed, still refused, and resolvable.
func TestRewindClockKeepsParkedKeys(t *testing.T) {
	ctx := context.Background()
	const span, retention, jump = time.Hour, 24 * time.Hour, 50 * 365 * 24 * time.Hour
	start := epoch.Add(9 * time.Hour)
	clock := oncetest.NewClock(start)
	path := filepath.Join(t.TempDir(), "x.db")
	opts := timeOpts(clock, span, retention)
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	clock.Advance(jump)
	for range 3 {
		db.Now()
	}
	req := oncekv.Request{Handler: "h", Key: "charge"}
	_, err = db.Claim(ctx, req, time.Minute)
	require.NoError(t, err)
	clock.Advance(2 * time.Minute)
	unknown := &oncekv.ClaimOptions{Probe: func(context.Context, string, oncekv.Attempt) (oncekv.Outcome, []byte, error) {
		return oncekv.OutcomeUnknown, nil, nil
	}}
	_, err = db.ClaimWith(ctx, req, time.Minute, unknown)
	require.ErrorIs(t, err, oncekv.ErrParked)
	require.NoError(t, db.Close())

	clock.Set(start.Add(time.Hour))
	_, err = oncekv.RewindClock(path, clock.Now(), opts)
	require.NoError(t, err)
	oncetest.Check(t, path)
	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	var parked []oncekv.MarkInfo
	require.NoError(t, db.Parked(func(m oncekv.MarkInfo) error { parked = append(parked, m); return nil }))
	require.Len(t, parked, 1)
	require.False(t, parked[0].Window.After(clock.Now()), "the index names the window the mark moved into: %v", parked[0].Window)
	_, err = db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) { return nil, nil })
	require.ErrorIs(t, err, oncekv.ErrParked, "still parked")
	require.NoError(t, db.ResolveParked("h", "charge", true, []byte("charged")))
	res, err := db.Apply(ctx, req, func(*oncekv.Tx) ([]byte, error) { return nil, nil })
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, "charged", string(res.Response))
}
