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

func TestAgeHistogramQuantile(t *testing.T) {
	bounds := oncekv.AgeBounds()
	require.Equal(t, time.Second, bounds[0])
	require.Equal(t, 365*24*time.Hour, bounds[oncekv.AgeBuckets-1])
	var h oncekv.AgeHistogram
	require.Zero(t, h.Quantile(0.5))
	// 98 duplicates within a second, one at 3 hours, one at 400 days.
	h.Count, h.Max, h.Sum = 100, 400*24*time.Hour, 0
	for i := range h.Buckets {
		h.Buckets[i] = 98
		if bounds[i] >= 3*time.Hour {
			h.Buckets[i] = 99
		}
	}
	require.Equal(t, time.Second, h.Quantile(0.5))
	require.Equal(t, time.Second, h.Quantile(0.98))
	require.Equal(t, 3*time.Hour, h.Quantile(0.99))
	require.Equal(t, 400*24*time.Hour, h.Quantile(1), "past the last bound: the max")
	h.Max = 2 * time.Hour
	h.Buckets = [oncekv.AgeBuckets]uint64{}
	for i := range h.Buckets {
		if bounds[i] >= 2*time.Hour {
			h.Buckets[i] = 100
		}
	}
	require.Equal(t, 2*time.Hour, h.Quantile(0.5), "never above the max")
	d := h.Sub(oncekv.AgeHistogram{Count: 40, Buckets: h.Buckets})
	require.EqualValues(t, 60, d.Count)
	require.Zero(t, d.Buckets[oncekv.AgeBuckets-1])
}

func TestDuplicateAgesPerHandler(t *testing.T) {
	clock := oncetest.NewClock(claimEpoch)
	db := oncetest.Open(t, &oncekv.Options{NoSync: true, Now: clock.Now, MaxHandlerStats: 1})
	ctx := context.Background()
	for _, h := range []string{"pay", "mail"} {
		_, err := db.Apply(ctx, oncekv.Request{Handler: h, Key: "k"}, nil)
		require.NoError(t, err)
	}
	clock.Advance(90 * time.Second)
	for range 2 {
		_, err := db.Apply(ctx, oncekv.Request{Handler: "pay", Key: "k"}, nil) // the second from the cache
		require.NoError(t, err)
	}
	clock.Advance(2 * time.Hour)
	_, err := db.Apply(ctx, oncekv.Request{Handler: "mail", Key: "k"}, nil)
	require.NoError(t, err)

	st := db.Stats()
	pay := st.DuplicateAges["pay"]
	require.EqualValues(t, 2, pay.Count)
	require.Equal(t, 90*time.Second, pay.Max)
	require.Equal(t, 180*time.Second, pay.Sum)
	require.Equal(t, 90*time.Second, pay.Quantile(0.99), "capped by the max, in the 5-minute bucket")
	require.NotContains(t, st.DuplicateAges, "mail", "past MaxHandlerStats")
	require.EqualValues(t, 1, st.OtherDuplicateAges.Count)
	require.Equal(t, 2*time.Hour+90*time.Second, st.OtherDuplicateAges.Max)
	require.EqualValues(t, 3, st.TotalDuplicateAges.Count)
	d := st.Sub(st)
	require.Zero(t, d.TotalDuplicateAges.Count)
	require.Zero(t, d.DuplicateAges["pay"].Count)
}

// TestWindowReportSurvivesReopen: Close saves the advisor's report with
// what it writes anyway, the next Open adds to it, a read-only Open reads
// it against the Retention of the process that saved it, and an Open that
// counted nothing leaves it (and the file) as it was.
func TestWindowReportSurvivesReopen(t *testing.T) {
	clock := oncetest.NewClock(claimEpoch)
	path := filepath.Join(t.TempDir(), "advised.db")
	opts := &oncekv.Options{NoSync: true, Now: clock.Now, ExpireInterval: -1, Retention: 6 * time.Hour, WindowSpan: time.Hour,
		TombstoneRetention: 48 * time.Hour}
	ctx := context.Background()
	dup := func(db *oncekv.DB, key string, after time.Duration) {
		_, err := db.Apply(ctx, oncekv.Request{Handler: "pay", Key: key}, nil)
		require.NoError(t, err)
		clock.Advance(after)
		res, err := db.Apply(ctx, oncekv.Request{Handler: "pay", Key: key}, nil)
		require.NoError(t, err)
		require.True(t, res.Duplicate)
	}
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	require.True(t, db.WindowReport().SavedAt.IsZero())
	dup(db, "a", time.Minute)
	require.NoError(t, db.Close()) // the clock moved: Close writes it, and the report with it

	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	r := db.WindowReport()
	require.Equal(t, claimEpoch.Add(time.Minute), r.SavedAt)
	require.EqualValues(t, 1, r.Handlers["pay"].DuplicateAges.Count)
	require.Zero(t, db.Stats().TotalDuplicateAges.Count, "Stats counts since Open")
	dup(db, "b", 3*time.Hour)
	r = db.WindowReport()
	require.EqualValues(t, 2, r.Handlers["pay"].DuplicateAges.Count)
	require.Equal(t, 3*time.Hour, r.Handlers["pay"].DuplicateAges.Max)
	require.NoError(t, db.Close())

	ro, err := oncekv.Open(path, &oncekv.Options{ReadOnly: true, Retention: time.Hour, Now: clock.Now})
	require.NoError(t, err)
	r = ro.WindowReport()
	require.Equal(t, 6*time.Hour, r.Retention, "the saving process's, not the reader's")
	require.Equal(t, 48*time.Hour, r.TombstoneRetention)
	require.EqualValues(t, 2, r.Handlers["pay"].DuplicateAges.Count)
	require.NoError(t, ro.Close())

	// Duplicates alone, the clock standing still: Close writes nothing.
	before := statFile(t, path)
	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	_, err = db.Apply(ctx, oncekv.Request{Handler: "pay", Key: "a"}, nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.Equal(t, before.bytes, statFile(t, path).bytes, "an untouched store is left as it was")

	// Saved with an expiry's floor too, before any Close.
	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	dup(db, "c", 8*time.Hour)
	st, err := db.Expire(ctx)
	require.NoError(t, err)
	require.Positive(t, st.Windows)
	copyPath := filepath.Join(t.TempDir(), "copy.db")
	_, err = db.BackupFile(copyPath)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	ro, err = oncekv.Open(copyPath, &oncekv.Options{ReadOnly: true})
	require.NoError(t, err)
	require.EqualValues(t, 3, ro.WindowReport().Handlers["pay"].DuplicateAges.Count)
	require.NoError(t, ro.Close())
}

var _ = fmt.Sprint
