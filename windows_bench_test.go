package oncekv_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/oncekv/oncekv"
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

// BenchmarkManyWindows measures a unique Apply (sync off) on a store with
// 168 live windows (7 days of 1h, the default) against one with MaxWindows
// live windows, 20 marks each, with the Bloom filters on and off: what
// the limit on Retention/WindowSpan lets a store cost at worst.
func BenchmarkManyWindows(b *testing.B) {
	for _, filters := range []bool{true, false} {
		b.Run(fmt.Sprintf("bloom=%v/windows=168-vs-%d", filters, oncekv.MaxWindows), func(b *testing.B) {
			few := openWindows(b, filters, 168, 20, 168*time.Hour)
			many := openWindows(b, filters, oncekv.MaxWindows, 20, oncekv.MaxWindows*time.Hour)
			pair(b, 1, "168-windows", func(i uint64) { applyUnique(b, few, i) },
				fmt.Sprintf("%d-windows", oncekv.MaxWindows), func(i uint64) { applyUnique(b, many, i) })
		})
	}
}
