package oncekv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/oncetest"
)

var tombEpoch = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC).Local()

// tombStore is a store of 1-hour windows, a 2-hour Retention and
// tombstones for a day, on a clock the test moves.
type tombStore struct {
	t     *testing.T
	path  string
	opts  *oncekv.Options
	clock *oncetest.Clock
	db    *oncekv.DB
	logs  *logRecorder
}

func openTombs(t *testing.T, tombstones time.Duration) *tombStore {
	t.Helper()
	s := &tombStore{t: t, path: filepath.Join(t.TempDir(), "tombs.db"), clock: oncetest.NewClock(tombEpoch), logs: &logRecorder{}}
	s.opts = &oncekv.Options{NoSync: true, Now: s.clock.Now, ExpireInterval: -1, Retention: 2 * time.Hour,
		WindowSpan: time.Hour, TombstoneRetention: tombstones, Logger: slog.New(s.logs)}
	s.reopen()
	t.Cleanup(func() {
		if s.db != nil {
			require.NoError(t, s.db.Close())
			oncetest.Check(t, s.path)
		}
	})
	return s
}

func (s *tombStore) reopen() {
	s.t.Helper()
	if s.db != nil {
		require.NoError(s.t, s.db.Close())
	}
	db, err := oncekv.Open(s.path, s.opts)
	require.NoError(s.t, err)
	s.db = db
}

func (s *tombStore) expire() oncekv.ExpireStats {
	s.t.Helper()
	st, err := s.db.Expire(context.Background())
	require.NoError(s.t, err)
	return st
}

// tombstoned applies key and lets Retention pass and expiry turn it into a
// tombstone; it returns the effect's runs, 1.
func (s *tombStore) tombstoned(key string) int {
	s.t.Helper()
	runs := 0
	_, err := applied(s.t, s.db, tombReq(key), &runs, "label")
	require.NoError(s.t, err)
	s.clock.Advance(4 * time.Hour)
	require.EqualValues(s.t, 1, s.expire().Tombstones)
	return runs
}

// logRecorder keeps the messages logged at warn and above.
type logRecorder struct {
	mu    sync.Mutex
	warns []string
}

func (r *logRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.warns = append(r.warns, rec.Message)
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }
func (r *logRecorder) count(substr string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, w := range r.warns {
		if strings.Contains(w, substr) {
			n++
		}
	}
	return n
}

func tombReq(key string) oncekv.Request {
	return oncekv.Request{Handler: "ship", Key: key, Payload: []byte("parcel " + key)}
}

// applied applies req with an effect that counts its runs in runs.
func applied(t *testing.T, db *oncekv.DB, req oncekv.Request, runs *int, resp string) (oncekv.Result, error) {
	t.Helper()
	return db.Apply(context.Background(), req, func(*oncekv.Tx) ([]byte, error) {
		*runs++
		return []byte(resp), nil
	})
}

func TestTombstoneSuppressesADuplicateAfterRetention(t *testing.T) {
	s := openTombs(t, 24*time.Hour)
	ctx := context.Background()
	runs := 0
	_, err := applied(t, s.db, tombReq("k1"), &runs, "label 1")
	require.NoError(t, err)
	_, err = s.db.Apply(ctx, tombReq("k2"), func(*oncekv.Tx) ([]byte, error) { return nil, oncekv.Permanent(errors.New("no such address")) })
	require.ErrorIs(t, err, oncekv.ErrFailed)
	_, err = s.db.Claim(ctx, tombReq("k3"), time.Minute) // left to run out: no outcome, no tombstone
	require.NoError(t, err)

	s.clock.Advance(4 * time.Hour)
	st := s.expire()
	require.EqualValues(t, 2, st.Tombstones)
	require.Equal(t, 1, st.Windows)

	for round := range 2 {
		res, err := applied(t, s.db, tombReq("k1"), &runs, "label 1 again")
		require.NoError(t, err, "round %d", round)
		require.Equal(t, oncekv.Result{Duplicate: true, ResponseExpired: true, FirstSeen: tombEpoch}, res, "round %d", round)
		require.Equal(t, 1, runs, "round %d: the effect did not run again", round)

		res, err = s.db.Apply(ctx, tombReq("k2"), mustNotApply(t))
		var fe *oncekv.FailedError
		require.ErrorAs(t, err, &fe, "round %d", round)
		require.Empty(t, fe.Message, "the failure's message expired with its mark")
		require.True(t, res.ResponseExpired)

		// No fingerprint is left: another payload is not told apart.
		other := tombReq("k1")
		other.Payload = []byte("another parcel")
		res, err = s.db.Apply(ctx, other, mustNotApply(t))
		require.NoError(t, err, "round %d: key reuse cannot be detected on a tombstone", round)
		require.True(t, res.ResponseExpired)

		c, err := s.db.Claim(ctx, tombReq("k1"), time.Minute)
		require.NoError(t, err)
		require.True(t, c.Done())
		require.True(t, c.Result().ResponseExpired)

		m, err := s.db.Mark("ship", "k1")
		require.NoError(t, err)
		require.True(t, m.Tombstone)
		require.Equal(t, oncekv.MarkDone, m.State)
		require.Nil(t, m.Response)
		requireCheckClean(t, s.db)
		require.EqualValues(t, 4, s.db.Stats().Handlers["ship"].TombstoneDuplicates, "k1 twice, k2 once, the claim once")
		s.reopen() // and again from the file
	}
	res, err := applied(t, s.db, tombReq("k3"), &runs, "label 3")
	require.NoError(t, err)
	require.False(t, res.Duplicate, "a claim that recorded no outcome leaves no tombstone")

	stats := s.db.Stats()
	require.EqualValues(t, 2, stats.Tombstones)
	require.Len(t, stats.TombstoneWindows, 1)
	require.Equal(t, tombEpoch, stats.TombstoneWindows[0].Start)
	require.Positive(t, stats.TombstoneWindows[0].FilterBytes, "the window's Bloom filter is kept for its tombstones")
	require.Positive(t, s.logs.count("tombstone"), "logged at warn")
}

func TestTombstonesExpireAfterTombstoneRetentionAndLateDuplicatesAreCounted(t *testing.T) {
	s := openTombs(t, 24*time.Hour)
	runs := s.tombstoned("k1")
	s.clock.Advance(12 * time.Hour)
	require.Zero(t, s.expire().TombstoneWindows, "kept until TombstoneRetention")
	res, err := applied(t, s.db, tombReq("k1"), &runs, "label")
	require.NoError(t, err)
	require.True(t, res.ResponseExpired)

	s.reopen() // the ghost filters are saved by Close
	s.clock.Advance(10 * time.Hour)
	st := s.expire()
	require.Equal(t, 1, st.TombstoneWindows)
	require.EqualValues(t, 1, st.TombstonesDropped)
	require.Empty(t, s.db.Stats().TombstoneWindows)

	res, err = applied(t, s.db, tombReq("k1"), &runs, "label")
	require.NoError(t, err)
	require.False(t, res.Duplicate, "every record of the key is gone: applied again")
	require.Equal(t, 2, runs)
	c := s.db.Stats().Handlers["ship"]
	require.EqualValues(t, 1, c.LateDuplicates, "counted, from the ghost filter")
	require.Equal(t, 1, s.logs.count("late duplicate"))

	for i := range 50 {
		_, err := applied(t, s.db, tombReq(fmt.Sprintf("fresh-%d", i)), &runs, "label")
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, s.db.Stats().Handlers["ship"].LateDuplicates, "new keys are not late duplicates")
}

func TestLateDuplicatesWithoutTombstones(t *testing.T) {
	s := openTombs(t, 0)
	runs := 0
	for _, k := range []string{"a", "b"} {
		_, err := applied(t, s.db, tombReq(k), &runs, "label")
		require.NoError(t, err)
	}
	s.clock.Advance(4 * time.Hour)
	st := s.expire()
	require.Zero(t, st.Tombstones, "no tombstones unless asked")
	require.EqualValues(t, 2, st.Marks)
	s.reopen()
	res, err := applied(t, s.db, tombReq("a"), &runs, "label")
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	_, err = s.db.Claim(context.Background(), tombReq("b"), time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 2, s.db.Stats().Handlers["ship"].LateDuplicates, "an Apply and a Claim of expired keys")
}

func TestForgetDropsATombstone(t *testing.T) {
	s := openTombs(t, 24*time.Hour)
	runs := s.tombstoned("k1")
	require.NoError(t, s.db.Forget("ship", "k1"))
	require.Zero(t, s.db.Stats().Tombstones)
	res, err := applied(t, s.db, tombReq("k1"), &runs, "label")
	require.NoError(t, err)
	require.False(t, res.Duplicate, "forgotten: applied again")
	require.Equal(t, 2, runs)
	s.reopen()
	_, err = s.db.Mark("ship", "k1")
	require.NoError(t, err, "the new mark")
}

// countdownCtx is a context whose Err reports it cancelled from its n-th
// call on, to interrupt Expire between two of its steps.
type countdownCtx struct {
	context.Context
	n atomic.Int64
}

func (c *countdownCtx) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// TestTombstonesOfAnInterruptedExpiry: Expire turns a window into
// tombstones in steps; stopped between two, the window answers every key
// from its marks or its tombstones, across a reopen, and the next Expire
// finishes. Every look-up also goes through filters that answer "maybe"
// to everything, and through the duplicate cache.
func TestTombstonesOfAnInterruptedExpiry(t *testing.T) {
	for _, adversary := range []bool{false, true} {
		t.Run(fmt.Sprintf("maybeFilters=%v", adversary), func(t *testing.T) {
			s := openTombs(t, 24*time.Hour)
			s.opts.ExpireStep = 7
			s.reopen()
			const keys = 100
			runs := 0
			for i := range keys {
				_, err := applied(t, s.db, tombReq(fmt.Sprintf("k%03d", i)), &runs, "label")
				require.NoError(t, err)
			}
			s.clock.Advance(4 * time.Hour)
			for stop := range 5 {
				ctx := &countdownCtx{Context: context.Background()}
				ctx.n.Store(2) // two steps of seven marks
				_, err := s.db.Expire(ctx)
				require.ErrorIs(t, err, context.Canceled)
				if adversary {
					oncekv.SetFilterHook(s.db, func(bool) bool { return true })
				}
				st := s.db.Stats()
				require.EqualValues(t, keys, st.Tombstones+st.LiveMarks, "stop %d: every key is a mark or a tombstone", stop)
				for i := range keys {
					res, err := applied(t, s.db, tombReq(fmt.Sprintf("k%03d", i)), &runs, "again")
					require.NoError(t, err)
					require.True(t, res.Duplicate, "stop %d key %d", stop, i)
				}
				require.Equal(t, keys, runs)
				requireCheckClean(t, s.db)
				s.reopen()
			}
			st := s.expire()
			require.Equal(t, 1, st.Windows)
			stats := s.db.Stats()
			require.EqualValues(t, keys, stats.Tombstones)
			require.Zero(t, stats.LiveMarks)
			for i := range keys {
				res, err := applied(t, s.db, tombReq(fmt.Sprintf("k%03d", i)), &runs, "again")
				require.NoError(t, err)
				require.True(t, res.ResponseExpired, "key %d", i)
			}
			require.Equal(t, keys, runs)
		})
	}
}

// TestTombstonesOfManyWindowsAfterReopen spreads keys over windows, some
// completed by late claims that moved their marks, turns them all into
// tombstones and checks every one after a reopen that loads the tombstone
// windows' filters from the file.
func TestTombstonesOfManyWindowsAfterReopen(t *testing.T) {
	s := openTombs(t, 48*time.Hour)
	ctx := context.Background()
	runs := 0
	var done []string
	var open []*oncekv.Claim // completed two windows later, which moves their marks
	for w := range 6 {
		if len(open) > 0 && w >= 2 {
			for _, c := range open[:4] {
				_, err := c.Complete(ctx, []byte("late"), nil)
				require.NoError(t, err)
			}
			open = open[4:]
		}
		for i := range 40 {
			key := fmt.Sprintf("w%d-%02d", w, i)
			if i%10 == 0 {
				c, err := s.db.Claim(ctx, tombReq(key), 3*time.Hour)
				require.NoError(t, err)
				open = append(open, c)
			} else {
				_, err := applied(t, s.db, tombReq(key), &runs, "label")
				require.NoError(t, err)
			}
			done = append(done, key)
		}
		s.clock.Advance(time.Hour)
	}
	for _, c := range open {
		_, err := c.Complete(ctx, []byte("late"), nil)
		require.NoError(t, err)
	}
	s.clock.Advance(30 * time.Minute)
	s.expire()
	s.reopen()
	s.clock.Advance(5 * time.Hour)
	st := s.expire()
	require.Positive(t, st.Tombstones)
	s.reopen()
	before := runs
	for _, key := range done {
		res, err := applied(t, s.db, tombReq(key), &runs, "again")
		require.NoError(t, err, key)
		require.True(t, res.Duplicate, key)
	}
	require.Equal(t, before, runs, "no effect ran twice")
	require.Positive(t, s.db.Stats().BloomNegatives, "the tombstone windows' filters answered")
}

func TestTombstoneRetentionOptions(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		opts oncekv.Options
		want string
	}{
		{"negative", oncekv.Options{TombstoneRetention: -time.Hour}, "TombstoneRetention"},
		{"not past Retention", oncekv.Options{Retention: 2 * time.Hour, TombstoneRetention: 2 * time.Hour}, "longer than Retention"},
		{"too many windows", oncekv.Options{Retention: 2 * time.Hour, WindowSpan: time.Minute, TombstoneRetention: 24 * time.Hour}, "MaxWindows"},
	} {
		_, err := oncekv.Open(filepath.Join(dir, tc.name+".db"), &tc.opts)
		require.ErrorIs(t, err, oncekv.ErrInvalidOptions, tc.name)
		require.Contains(t, err.Error(), tc.want, tc.name)
	}
}

// TestDamagedTombstoneIsCorrupt: a tombstone chunk whose bytes changed is
// ErrCorrupt, naming the chunk, for the keys of its range, and Check
// reports it; keys of other chunks still answer.
func TestDamagedTombstoneIsCorrupt(t *testing.T) {
	s := openTombs(t, 24*time.Hour)
	runs := 0
	for i := range 500 {
		_, err := applied(t, s.db, tombReq(fmt.Sprintf("k%03d", i)), &runs, "label")
		require.NoError(t, err)
	}
	s.clock.Advance(4 * time.Hour)
	require.EqualValues(t, 500, s.expire().Tombstones)
	require.NoError(t, s.db.Close())
	s.db = nil
	b, err := bolt.Open(s.path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		return layout.ForEachTombWindow(tx, func(_ int64, tb *bolt.Bucket) error {
			k, v := tb.Cursor().First()
			v = bytes.Clone(v)
			v[len(v)/2] ^= 1
			return tb.Put(bytes.Clone(k), v)
		})
	}))
	require.NoError(t, b.Close())
	s.reopen()
	_, err = applied(t, s.db, tombReq("k000"), &runs, "label")
	require.ErrorIs(t, err, oncekv.ErrCorrupt)
	var re *oncekv.RecordError
	require.ErrorAs(t, err, &re)
	require.Contains(t, re.Bucket, "oncekv.tomb/")
	require.Equal(t, "ship/k000", re.Key)
	res, err := applied(t, s.db, tombReq("k499"), &runs, "label")
	require.NoError(t, err, "another chunk")
	require.True(t, res.ResponseExpired)
	require.Equal(t, 500, runs, "no effect ran again")
	var problems []error
	require.NoError(t, s.db.Check(func(p error) error { problems = append(problems, p); return nil }))
	require.Len(t, problems, 2, "the chunk, and its window's count") // the chunk's entries are not counted
	require.NoError(t, s.db.Close())
	s.db = nil
}
