package oncekv_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// benchMarks is the store size of the expiry and open benchmarks:
// ONCEKV_BENCH_MARKS, default one million.
func benchMarks(b *testing.B) int {
	if s := os.Getenv("ONCEKV_BENCH_MARKS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("ONCEKV_BENCH_MARKS=%q: want a positive integer", s)
		}
		return n
	}
	return 1_000_000
}

// fill applies n unique marks, spread evenly over the given number of
// windows starting at the clock's time, in batches of 10000.
func fill(b *testing.B, db *oncekv.DB, clock *oncetest.Clock, n, windows int, span time.Duration) {
	b.Helper()
	const batch = 10000
	perWindow := (n + windows - 1) / windows
	reqs := make([]oncekv.Request, 0, batch)
	flush := func() {
		if _, err := db.ApplyBatch(context.Background(), reqs, nil); err != nil {
			b.Fatal(err)
		}
		reqs = reqs[:0]
	}
	for i := range n {
		if i > 0 && i%perWindow == 0 {
			flush()
			clock.Advance(span)
		}
		reqs = append(reqs, oncekv.Request{Handler: "fill", Key: "key-" + strconv.Itoa(i)})
		if len(reqs) == batch {
			flush()
		}
	}
	flush()
}

// BenchmarkUnseenApply measures unique-key Apply (sync off, so the look-ups
// are not hidden behind fsync) on a store with 1 live window against stores
// with 24 and 168 live windows of 2000 marks each, alternately, with and
// without the Bloom filters. With filters the cost should stay nearly flat
// as windows are added; without, every window is one more B-tree look-up,
// twice (snapshot and write path).
func BenchmarkUnseenApply(b *testing.B) {
	for _, filters := range []bool{true, false} {
		for _, windows := range []int{24, 168} {
			b.Run(fmt.Sprintf("bloom=%v/windows=1-vs-%d", filters, windows), func(b *testing.B) {
				one := openWindows(b, filters, 1, 2000, 7*24*time.Hour)
				many := openWindows(b, filters, windows, 2000, 7*24*time.Hour)
				pair(b, 1, "1-window", func(i uint64) { applyUnique(b, one, i) },
					fmt.Sprintf("%d-windows", windows), func(i uint64) { applyUnique(b, many, i) })
			})
		}
	}
}

// openWindows opens a store (sync off; filters on or off) with retention,
// fills the given number of 1h windows with perWindow unique marks each,
// and leaves its clock in the newest window.
func openWindows(b *testing.B, filters bool, windows, perWindow int, retention time.Duration) *oncekv.DB {
	clock := oncetest.NewClock(epoch)
	opts := &oncekv.Options{NoSync: true, Now: clock.Now, ExpireInterval: -1, Retention: retention}
	if !filters {
		opts.BloomFalsePositiveRate = -1
	}
	db, err := oncekv.Open(filepath.Join(b.TempDir(), "x.db"), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	fill(b, db, clock, perWindow*windows, windows, time.Hour)
	clock.Advance(-time.Hour) // stay in the newest window
	return db
}

// BenchmarkExpireLargeWindow expires one window of benchMarks marks while
// another goroutine keeps applying new keys, and reports the expiry's time,
// its longest step, and the longest a concurrent Apply took. Run it with
// -benchtime 1x.
func BenchmarkExpireLargeWindow(b *testing.B) {
	n := benchMarks(b)
	b.StopTimer() // only Expire itself is timed
	for range b.N {
		clock := oncetest.NewClock(epoch)
		db, err := oncekv.Open(filepath.Join(b.TempDir(), "x.db"), &oncekv.Options{NoSync: true, Now: clock.Now, ExpireInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		fill(b, db, clock, n, 1, time.Hour)
		clock.Advance(8 * 24 * time.Hour)

		var stop atomic.Bool
		var worst time.Duration
		var writes int
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				began := time.Now()
				if _, err := db.Apply(context.Background(), oncekv.Request{Handler: "live", Key: strconv.Itoa(i)}, nil); err != nil {
					b.Error(err)
					return
				}
				worst = max(worst, time.Since(began))
				writes++
			}
		})
		b.StartTimer()
		st, err := db.Expire(context.Background())
		b.StopTimer()
		stop.Store(true)
		wg.Wait()
		if err != nil || st.Marks != uint64(n) {
			b.Fatalf("expired %d of %d marks: %v", st.Marks, n, err)
		}
		b.ReportMetric(float64(st.Duration.Milliseconds()), "expire-ms")
		b.ReportMetric(float64(st.LongestStep.Microseconds())/1000, "longest-step-ms")
		b.ReportMetric(float64(worst.Microseconds())/1000, "worst-apply-ms")
		b.ReportMetric(float64(writes), "applies-during")
		b.ReportMetric(float64(st.Steps), "steps")
		db.Close()
	}
}

// BenchmarkOpen reopens a store of benchMarks live marks spread over 24
// windows, with the sealed windows' filters persisted (only the newest is
// rebuilt from its keys) and with them removed (every window rebuilt). Run
// it with -benchtime 3x or so.
func BenchmarkOpen(b *testing.B) {
	n := benchMarks(b)
	clock := oncetest.NewClock(epoch)
	opts := &oncekv.Options{NoSync: true, Now: clock.Now, ExpireInterval: -1}
	path := filepath.Join(b.TempDir(), "x.db")
	db, err := oncekv.Open(path, opts)
	if err != nil {
		b.Fatal(err)
	}
	fill(b, db, clock, n, 24, time.Hour)
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	bare := filepath.Join(b.TempDir(), "bare.db")
	copyWithoutFilters(b, path, bare)

	for _, tc := range []struct{ name, path string }{{"persisted-filters", path}, {"rebuild-all", bare}} {
		b.Run(fmt.Sprintf("marks=%d/%s", n, tc.name), func(b *testing.B) {
			for b.Loop() {
				db, err := oncekv.Open(tc.path, opts)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if got := db.Stats().LiveMarks; got != uint64(n) {
					b.Fatalf("live marks %d, want %d", got, n)
				}
				db.Close()
				b.StartTimer()
			}
		})
	}
}

func copyWithoutFilters(b *testing.B, from, to string) {
	raw, err := os.ReadFile(from)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(to, raw, 0o600); err != nil {
		b.Fatal(err)
	}
	bdb, err := bolt.Open(to, 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer bdb.Close()
	if err := bdb.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(layout.FiltersRoot) }); err != nil {
		b.Fatal(err)
	}
}
