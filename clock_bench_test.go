package oncekv_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// BenchmarkClockSave measures what saving the store's clock costs a unique
// Apply (sync off, so the page writes are not hidden behind fsync). In the
// common case the clock moves less than a second between commits and is
// saved about once a second; the candidate's clock moves 2s per call, so
// every commit also writes the clock record. The ratio and the pages each
// commit writes show what saving on every commit would cost; the common
// case pays it once a second.
func BenchmarkClockSave(b *testing.B) {
	open := func(b *testing.B, clock *oncetest.Clock) *oncekv.DB {
		db, err := oncekv.Open(filepath.Join(b.TempDir(), "x.db"), &oncekv.Options{
			NoSync: true, Now: clock.Now, ExpireInterval: -1,
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		return db
	}
	rare, every := oncetest.NewClock(epoch), oncetest.NewClock(epoch)
	dbRare, dbEvery := open(b, rare), open(b, every)
	pagesRare, pagesEvery := oncekv.PagesWritten(dbRare), oncekv.PagesWritten(dbEvery)
	pair(b, 1, "saved-once-a-second", func(i uint64) {
		rare.Advance(time.Microsecond)
		applyUnique(b, dbRare, i)
	}, "saved-every-commit", func(i uint64) {
		every.Advance(2 * time.Second)
		applyUnique(b, dbEvery, i)
	})
	n := float64(b.N)
	b.ReportMetric(float64(oncekv.PagesWritten(dbRare)-pagesRare)/n, "saved-once-a-second-pages/op")
	b.ReportMetric(float64(oncekv.PagesWritten(dbEvery)-pagesEvery)/n, "saved-every-commit-pages/op")
}
