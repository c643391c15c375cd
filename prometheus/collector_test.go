package prometheus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
	oncekvprom "github.com/oncekv/oncekv/prometheus"
)

var epoch = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func openStore(t *testing.T) (*oncekv.DB, *oncetest.Clock, string) {
	t.Helper()
	clock := oncetest.NewClock(epoch)
	path := filepath.Join(t.TempDir(), "metrics.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, Now: clock.Now, ExpireInterval: -1,
		WindowSpan: time.Hour, Retention: 2 * time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db, clock, path
}

func newCollector(t *testing.T, db *oncekv.DB, opts *oncekvprom.Options) *oncekvprom.Collector {
	t.Helper()
	c, err := oncekvprom.New(db, opts)
	require.NoError(t, err)
	return c
}

func apply(db *oncekv.DB, handler, key, payload string, effect func(*oncekv.Tx) ([]byte, error)) error {
	_, err := db.Apply(context.Background(), oncekv.Request{Handler: handler, Key: key, Payload: []byte(payload)}, effect)
	return err
}

// drive takes a store through every result of oncekv_apply_total.
func drive(t *testing.T, db *oncekv.DB) {
	t.Helper()
	ctx := context.Background()
	for i := range 3 {
		require.NoError(t, apply(db, "orders", fmt.Sprint("o", i), "p", nil))
	}
	require.NoError(t, apply(db, "orders", "o0", "p", nil))                         // duplicate
	require.NoError(t, apply(db, "orders", "o1", "p", nil))                         // duplicate
	require.ErrorIs(t, apply(db, "orders", "o2", "other", nil), oncekv.ErrKeyReuse) // key reuse
	transient := errors.New("gateway down")
	require.ErrorIs(t, apply(db, "orders", "o3", "p", func(*oncekv.Tx) ([]byte, error) { return nil, transient }), transient)
	permanent := oncekv.Permanent(errors.New("card declined"))
	require.ErrorIs(t, apply(db, "mail", "m1", "p", func(*oncekv.Tx) ([]byte, error) { return nil, permanent }), oncekv.ErrFailed)
	require.ErrorIs(t, apply(db, "mail", "m1", "p", nil), oncekv.ErrFailed) // failed_replayed
	_, err := db.Claim(ctx, oncekv.Request{Handler: "mail", Key: "m2", Payload: []byte("p")}, time.Minute)
	require.NoError(t, err)
	require.ErrorIs(t, apply(db, "mail", "m2", "p", nil), oncekv.ErrInProgress)
	require.ErrorIs(t, apply(db, "mail", "", "p", nil), oncekv.ErrKeyRequired)
}

func TestCollectAndLint(t *testing.T) {
	db, _, _ := openStore(t)
	drive(t, db)
	requireLintClean(t, newCollector(t, db, nil))
}

// requireLintClean checks c's metrics with promlint, and with a pedantic
// registry: Collect sends only what Describe declared, with consistent
// labels and help.
func requireLintClean(t *testing.T, c prom.Collector) {
	t.Helper()
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	require.Empty(t, problems)
	reg := prom.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	_, err = reg.Gather()
	require.NoError(t, err)
}

func TestCollectAndCompare(t *testing.T) {
	db, clock, _ := openStore(t)
	drive(t, db)
	clock.Advance(30 * time.Minute)
	c := newCollector(t, db, nil)

	want := `
# HELP oncekv_duplicates_suppressed_total Requests answered from a stored mark without running the effect. Zero for long is suspicious, not good: at-least-once delivery does redeliver.
# TYPE oncekv_duplicates_suppressed_total counter
oncekv_duplicates_suppressed_total{handler="mail"} 0
oncekv_duplicates_suppressed_total{handler="orders"} 2
# HELP oncekv_idempotency_key_conflicts_total Requests refused with ErrInProgress because a live claim held the key (HTTP 409).
# TYPE oncekv_idempotency_key_conflicts_total counter
oncekv_idempotency_key_conflicts_total{handler="mail"} 1
oncekv_idempotency_key_conflicts_total{handler="orders"} 0
# HELP oncekv_live_marks Marks in the live windows.
# TYPE oncekv_live_marks gauge
oncekv_live_marks 5
# HELP oncekv_oldest_mark_age_seconds Age of the oldest live window holding marks; no mark is older. 0 with no marks.
# TYPE oncekv_oldest_mark_age_seconds gauge
oncekv_oldest_mark_age_seconds 1800
# HELP oncekv_windows Live windows.
# TYPE oncekv_windows gauge
oncekv_windows 1
`
	require.Equal(t, 1.0, gather(t, c, "oncekv_invalid_requests_total", nil), "the empty key, counted store-wide")
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want),
		"oncekv_duplicates_suppressed_total", "oncekv_idempotency_key_conflicts_total",
		"oncekv_live_marks", "oncekv_oldest_mark_age_seconds", "oncekv_windows"))

	results := map[string]map[string]float64{
		"orders": {"applied": 3, "duplicate": 2, "key_reuse": 1, "in_progress": 0, "failed": 0,
			"failed_replayed": 0, "effect_error": 1, "aborted": 0},
		"mail": {"applied": 0, "duplicate": 0, "key_reuse": 0, "in_progress": 1, "failed": 1,
			"failed_replayed": 1, "effect_error": 0, "aborted": 0},
	}
	for handler, byResult := range results {
		for result, n := range byResult {
			got := gather(t, c, "oncekv_apply_total", map[string]string{"handler": handler, "result": result})
			require.Equal(t, n, got, "oncekv_apply_total{handler=%q,result=%q}", handler, result)
		}
	}

	// Expiry moves marks from the gauge to the counter.
	clock.Advance(3 * time.Hour)
	_, err := db.Expire(context.Background())
	require.NoError(t, err)
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP oncekv_expired_marks_total Marks dropped by expiry; a retry of one of their keys is applied again.
# TYPE oncekv_expired_marks_total counter
oncekv_expired_marks_total 5
# HELP oncekv_expired_windows_total Windows of marks dropped by expiry.
# TYPE oncekv_expired_windows_total counter
oncekv_expired_windows_total 1
# HELP oncekv_live_marks Marks in the live windows.
# TYPE oncekv_live_marks gauge
oncekv_live_marks 0
`), "oncekv_expired_marks_total", "oncekv_expired_windows_total", "oncekv_live_marks"))
}

// gather returns the value of the one series of name with the given labels
// (a counter, gauge or histogram's sample count).
func gather(t *testing.T, c prom.Collector, name string, labels map[string]string) float64 {
	t.Helper()
	reg := prom.NewRegistry()
	require.NoError(t, reg.Register(c))
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			return value(m)
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

func TestHistogramsAndFileMetrics(t *testing.T) {
	db, _, path := openStore(t)
	drive(t, db)
	reqs := make([]oncekv.Request, 20)
	for i := range reqs {
		reqs[i] = oncekv.Request{Handler: "batch", Key: fmt.Sprint("b", i), Payload: []byte("p")}
	}
	_, err := db.ApplyBatch(context.Background(), reqs, nil)
	require.NoError(t, err)
	c := newCollector(t, db, nil)

	commits := gather(t, c, "oncekv_commits_total", nil)
	require.Positive(t, commits)
	require.Equal(t, commits, gather(t, c, "oncekv_commit_duration_seconds", nil), "every commit is timed")

	reg := prom.NewRegistry()
	require.NoError(t, reg.Register(c))
	families, err := reg.Gather()
	require.NoError(t, err)
	var h *dto.Histogram
	for _, f := range families {
		if f.GetName() == "oncekv_requests_per_commit" {
			h = f.GetMetric()[0].GetHistogram()
		}
	}
	require.NotNil(t, h)
	st := db.Stats()
	require.Equal(t, st.CommitHistograms.MarkCommits, h.GetSampleCount())
	require.Equal(t, float64(st.CommitHistograms.RequestSum), h.GetSampleSum())
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == 16 {
			require.Equal(t, h.GetSampleCount()-1, b.GetCumulativeCount(), "only the batch of 20 is over 16")
		}
	}

	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, float64(fi.Size()), gather(t, c, "oncekv_db_size_bytes", nil))
	require.Equal(t, float64(st.File.PageSize), gather(t, c, "oncekv_db_page_size_bytes", nil))
	require.Equal(t, float64(st.File.FreeBytes), gather(t, c, "oncekv_db_free_bytes", nil))
	require.Zero(t, gather(t, c, "oncekv_db_open_read_transactions", nil))
}

func TestHandlerCardinalityIsCapped(t *testing.T) {
	db, _, _ := openStore(t)
	c := newCollector(t, db, &oncekvprom.Options{MaxHandlers: 2})
	for _, h := range []string{"b", "c", "a", "d", "\xff\xfe", oncekvprom.OtherHandler} {
		require.NoError(t, apply(db, h, "k", "p", nil))
	}
	applied := func(handler string) float64 {
		return gather(t, c, "oncekv_apply_total", map[string]string{"handler": handler, "result": "applied"})
	}
	require.Equal(t, 1.0, applied("a"))
	require.Equal(t, 1.0, applied("b"))
	require.Equal(t, 4.0, applied(oncekvprom.OtherHandler), "c, d, an invalid UTF-8 name and _other itself")
	require.Equal(t, 3, testutil.CollectAndCount(c, "oncekv_duplicates_suppressed_total"), "a, b and _other")

	// A handler that sorts first but comes after the cap does not push
	// "a" out: series never move, so every counter only grows.
	require.NoError(t, apply(db, "0", "k", "p", nil))
	require.Equal(t, 1.0, applied("a"))
	require.Equal(t, 5.0, applied(oncekvprom.OtherHandler))
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	require.Empty(t, problems)
}

func TestNewRejectsBadOptions(t *testing.T) {
	_, err := oncekvprom.New(nil, nil)
	require.ErrorIs(t, err, oncekvprom.ErrInvalidOptions)
	db, _, _ := openStore(t)
	_, err = oncekvprom.New(db, &oncekvprom.Options{MaxHandlers: -1})
	require.ErrorIs(t, err, oncekvprom.ErrInvalidOptions)
	require.Contains(t, err.Error(), "MaxHandlers")
}

func TestCountersResetOnReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reopen.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	require.NoError(t, apply(db, "h", "k", "p", nil))
	require.NoError(t, db.Close())

	db, err = oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	c := newCollector(t, db, nil)
	require.Zero(t, gather(t, c, "oncekv_commits_total", nil), "a restart resets the counters")
	require.Equal(t, 1.0, gather(t, c, "oncekv_live_marks", nil), "the gauges describe the file")
}
