package oncekv_test

import (
	"context"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

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
