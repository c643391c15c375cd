package oncekv_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/oncekv/oncekv"
)

// BenchmarkApplierVsApply, durable: each iteration applies 256 new keys
// three ways back to back on one store (see pair): one goroutine calling
// Apply one request after another, eight goroutines calling Apply at once,
// and one goroutine submitting to an Applier (then Flush). It reports the
// three times per request and the Applier's speed-ups over each:
// applier-x-sequential (goal >= 3) and applier-x-8-goroutines (goal >=
// 0.8), with the requests per commit of the two concurrent ways.
//
//	go test -run '^$' -bench ApplierVsApply -benchtime 20x .
func BenchmarkApplierVsApply(b *testing.B) {
	const perRound = 256
	db := openBench(b, false)
	a, err := db.NewApplier(oncekv.ApplierOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	ctx := context.Background()
	var mu sync.Mutex
	var next uint64
	take := func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		next++
		return next
	}
	var tSeq, t8, tApplier time.Duration
	var commits8, commitsApplier uint64
	var failed error
	var failOnce sync.Once
	fail := func(err error) { failOnce.Do(func() { failed = err }) }
	for b.Loop() {
		start := time.Now()
		for range perRound {
			applyUnique(b, db, take())
		}
		tSeq += time.Since(start)

		before := db.Stats().Commits
		start = time.Now()
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range perRound / 8 {
					if err := tryApplyUnique(db, take()); err != nil {
						fail(err)
						return
					}
				}
			})
		}
		wg.Wait()
		t8 += time.Since(start)
		commits8 += db.Stats().Commits - before

		before = db.Stats().Commits
		start = time.Now()
		for range perRound {
			key := benchKey(take())
			req := oncekv.Request{Handler: "bench", Key: string(key), Payload: benchValue}
			if err := a.Submit(ctx, req, func(tx *oncekv.Tx) ([]byte, error) { return putEffect(tx, key) }, func(_ oncekv.Result, err error) {
				if err != nil {
					fail(err)
				}
			}); err != nil {
				b.Fatal(err)
			}
		}
		if err := a.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		tApplier += time.Since(start)
		commitsApplier += db.Stats().Commits - before
		if failed != nil {
			b.Fatal(failed)
		}
	}
	n := float64(b.N * perRound)
	b.ReportMetric(float64(tSeq.Nanoseconds())/n, "sequential-ns/op")
	b.ReportMetric(float64(t8.Nanoseconds())/n, "8-goroutines-ns/op")
	b.ReportMetric(float64(tApplier.Nanoseconds())/n, "applier-ns/op")
	b.ReportMetric(float64(tSeq)/float64(tApplier), "applier-x-sequential")
	b.ReportMetric(float64(t8)/float64(tApplier), "applier-x-8-goroutines")
	b.ReportMetric(n/float64(commits8), "calls/commit(8)")
	b.ReportMetric(n/float64(commitsApplier), "calls/commit(applier)")
}
