package oncekv_test

import (
	"bytes"
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

// BenchmarkDuplicateApply times a duplicate Apply (the key already DONE),
// which takes no write lock and commits nothing: with one goroutine and
// with eight at once (on however many cores there are), with sync on and
// off (which should not matter: a duplicate never commits). Its keys fit
// the duplicate cache; the "uncached" cases give each key a response too
// large for the cache, so that every duplicate reads its mark in a read
// transaction. Each reports the commits per duplicate, which must be 0.
// Profile it with:
//
//	go test -run '^$' -bench DuplicateApply -benchmem -cpuprofile /tmp/dup.prof .
func BenchmarkDuplicateApply(b *testing.B) {
	for _, mode := range []struct {
		name     string
		noSync   bool
		response []byte
	}{
		{"durable", false, []byte("ok")},
		{"nosync", true, []byte("ok")},
		{"nosync-uncached", true, bytes.Repeat([]byte("r"), 300)},
	} {
		for _, clients := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/c%d", mode.name, clients), func(b *testing.B) {
				db := openBench(b, mode.noSync)
				reqs := loadDuplicates(b, db, mode.response)
				commits := db.Stats().Commits
				b.ReportAllocs()
				b.ResetTimer()
				if clients == 1 {
					i := 0
					for b.Loop() {
						applyDuplicate(b, db, &reqs[i%dupKeys], mode.response)
						i++
					}
				} else {
					b.SetParallelism((clients + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
					var next atomic.Uint64
					b.RunParallel(func(pb *testing.PB) {
						i := next.Add(dupKeys / 8)
						for pb.Next() {
							applyDuplicate(b, db, &reqs[i%dupKeys], mode.response)
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

// loadDuplicates applies dupKeys keys, each with an effect returning
// response, and returns their requests, ready to be sent again as
// duplicates.
func loadDuplicates(b *testing.B, db *oncekv.DB, response []byte) []oncekv.Request {
	b.Helper()
	reqs := make([]oncekv.Request, dupKeys)
	for i := range reqs {
		reqs[i] = oncekv.Request{Handler: "bench", Key: string(benchKey(uint64(i))), Payload: benchValue}
	}
	res, err := db.ApplyBatch(context.Background(), reqs, func(tx *oncekv.Tx, i int) ([]byte, error) {
		_, err := putEffect(tx, []byte(reqs[i].Key))
		return response, err
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
func applyDuplicate(b *testing.B, db *oncekv.DB, req *oncekv.Request, response []byte) {
	res, err := db.Apply(context.Background(), *req, nil)
	if err != nil || !res.Duplicate || !bytes.Equal(res.Response, response) {
		b.Error("not a duplicate:", res, err)
	}
}
