package oncekv_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/oncekv/oncekv"
)

// dupKeys is how many DONE keys BenchmarkDuplicateApply cycles through: more
// than one, so the look-ups walk the B-tree as a consumer's retries would,
// and few enough that the pages stay in memory.
const dupKeys = 4096

// BenchmarkDuplicateApply times a duplicate Apply (the key already DONE):
// the read-transaction fast path, which takes no write lock and commits
// nothing. It runs with one goroutine and with eight at once (on however
// many cores there are), with sync on and off (which should not matter:
// a duplicate never commits), and reports the commits per duplicate, which
// must be 0. Profile it with:
//
//	go test -run '^$' -bench DuplicateApply -benchmem -cpuprofile /tmp/dup.prof .
func BenchmarkDuplicateApply(b *testing.B) {
	for _, mode := range []struct {
		name   string
		noSync bool
	}{{"durable", false}, {"nosync", true}} {
		for _, clients := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/c%d", mode.name, clients), func(b *testing.B) {
				db := openBench(b, mode.noSync)
				reqs := loadDuplicates(b, db)
				commits := db.Stats().Commits
				b.ReportAllocs()
				b.ResetTimer()
				if clients == 1 {
					i := 0
					for b.Loop() {
						applyDuplicate(b, db, &reqs[i%dupKeys])
						i++
					}
				} else {
					b.SetParallelism((clients + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
					var next atomic.Uint64
					b.RunParallel(func(pb *testing.PB) {
						i := next.Add(dupKeys / 8)
						for pb.Next() {
							applyDuplicate(b, db, &reqs[i%dupKeys])
							i++
						}
					})
				}
				b.StopTimer()
				b.ReportMetric(float64(db.Stats().Commits-commits)/float64(b.N), "commits/op")
			})
		}
	}
}

// loadDuplicates applies dupKeys keys and returns their requests, ready to
// be sent again as duplicates.
func loadDuplicates(b *testing.B, db *oncekv.DB) []oncekv.Request {
	b.Helper()
	reqs := make([]oncekv.Request, dupKeys)
	for i := range reqs {
		reqs[i] = oncekv.Request{Handler: "bench", Key: string(benchKey(uint64(i))), Payload: benchValue}
	}
	res, err := db.ApplyBatch(context.Background(), reqs, func(tx *oncekv.Tx, i int) ([]byte, error) {
		return putEffect(tx, []byte(reqs[i].Key))
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	return reqs
}

// applyDuplicate sends req again and fails the benchmark unless it comes
// back as a duplicate with the stored response. It may run on any
// goroutine, so it reports with Error, not Fatal.
func applyDuplicate(b *testing.B, db *oncekv.DB, req *oncekv.Request) {
	res, err := db.Apply(context.Background(), *req, nil)
	if err != nil || !res.Duplicate || string(res.Response) != "ok" {
		b.Error("not a duplicate:", res, err)
	}
}
