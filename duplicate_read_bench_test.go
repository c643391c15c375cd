package oncekv_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/oncekv/oncekv"
)

// BenchmarkDuplicateSharedVsOwnSnapshot times duplicates answered by the
// read path two ways side by side (see pair), each on its own store loaded
// alike: "own", every look-up opening and rolling back its own bbolt read
// transaction, as before shared snapshots (oncekv.SetOwnSnapshots); and
// "shared", the read path as it is. Cases: "cached", keys the duplicate
// cache holds, which must not change; "uncached", responses too large for
// the cache, so every duplicate reads its mark; "evicted", more keys than
// the cache holds, cycled through. Each with one goroutine and with eight
// at once (each round of 128 duplicates split among them). Run it with:
//
//	go test -run '^$' -bench DuplicateSharedVsOwnSnapshot -benchtime 2000x .
func BenchmarkDuplicateSharedVsOwnSnapshot(b *testing.B) {
	for _, c := range []struct {
		name     string
		keys     int
		response []byte
	}{
		{"cached", 4096, []byte("ok")},
		{"uncached", 4096, bytes.Repeat([]byte("r"), 300)},
		{"evicted", 1 << 16, []byte("ok")},
	} {
		for _, clients := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/c%d", c.name, clients), func(b *testing.B) {
				own, shared := openBench(b, true), openBench(b, true)
				oncekv.SetOwnSnapshots(own, true)
				reqs := loadDuplicatesN(b, own, c.keys, c.response)
				loadDuplicatesN(b, shared, c.keys, c.response)
				const perRound = 128
				var next uint64 // the same keys, in the same order, for both
				round := func(db *oncekv.DB, first uint64) {
					if clients == 1 {
						for j := range uint64(perRound) {
							applyDuplicate(b, db, &reqs[(first+j)%uint64(len(reqs))], c.response)
						}
						return
					}
					var wg sync.WaitGroup
					for g := range uint64(clients) {
						wg.Go(func() {
							for j := range uint64(perRound / clients) {
								k := first + g*uint64(perRound/clients) + j
								applyDuplicate(b, db, &reqs[k%uint64(len(reqs))], c.response)
							}
						})
					}
					wg.Wait()
				}
				commits := own.Stats().Commits + shared.Stats().Commits
				b.ReportAllocs()
				pair(b, perRound, "own", func(uint64) { round(own, next) }, "shared", func(uint64) {
					round(shared, next)
					next += perRound
				})
				if n := own.Stats().Commits + shared.Stats().Commits - commits; n != 0 {
					b.Fatalf("%d commits for duplicates", n)
				}
			})
		}
	}
}

// loadDuplicatesN applies n keys in batches of 4096, each with an effect
// returning response, and returns their requests, ready to be sent again
// as duplicates.
func loadDuplicatesN(b *testing.B, db *oncekv.DB, n int, response []byte) []oncekv.Request {
	b.Helper()
	reqs := make([]oncekv.Request, n)
	for i := range reqs {
		reqs[i] = oncekv.Request{Handler: "bench", Key: string(benchKey(uint64(i))), Payload: benchValue}
	}
	for start := 0; start < n; start += 4096 {
		batch := reqs[start:min(start+4096, n)]
		res, err := db.ApplyBatch(context.Background(), batch, func(tx *oncekv.Tx, i int) ([]byte, error) {
			_, err := putEffect(tx, []byte(batch[i].Key))
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
	}
	return reqs
}
