package oncekv_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
)

// The benchmarks compare oncekv with bare bbolt doing the same user write,
// side by side in one run, so the ratio is what dedup costs on this machine
// whatever else it is doing. Run them with:
//
//	go test -run '^$' -bench . -benchtime 2000x -count 3 .

var benchValue = make([]byte, 64)

func benchKey(i uint64) []byte { return binary.BigEndian.AppendUint64([]byte("key-"), i) }

// putEffect is the user write every variant performs: one 64-byte value.
func putEffect(tx *oncekv.Tx, key []byte) ([]byte, error) {
	b, err := tx.CreateBucketIfNotExists([]byte("bench"))
	if err != nil {
		return nil, err
	}
	return []byte("ok"), b.Put(key, benchValue)
}

func openBench(b *testing.B, noSync bool) *oncekv.DB {
	b.Helper()
	db, err := oncekv.Open(filepath.Join(b.TempDir(), "bench.db"), &oncekv.Options{NoSync: noSync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

func openBolt(b *testing.B, noSync bool) *bolt.DB {
	b.Helper()
	db, err := bolt.Open(filepath.Join(b.TempDir(), "bolt.db"), 0o600, &bolt.Options{NoSync: noSync, FreelistType: bolt.FreelistMapType})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

func syncModes() []struct {
	name   string
	noSync bool
} {
	return []struct {
		name   string
		noSync bool
	}{{"durable", false}, {"nosync", true}}
}

// BenchmarkUniqueApply: every call is a new key, so every call commits.
func BenchmarkUniqueApply(b *testing.B) {
	for _, mode := range syncModes() {
		b.Run(mode.name+"/bbolt", func(b *testing.B) {
			db := openBolt(b, mode.noSync)
			var i uint64
			for b.Loop() {
				i++
				key := benchKey(i)
				if err := db.Update(func(tx *bolt.Tx) error {
					bk, err := tx.CreateBucketIfNotExists([]byte("bench"))
					if err != nil {
						return err
					}
					return bk.Put(key, benchValue)
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(mode.name+"/oncekv", func(b *testing.B) {
			db := openBench(b, mode.noSync)
			ctx := context.Background()
			var i uint64
			for b.Loop() {
				i++
				key := benchKey(i)
				if _, err := db.Apply(ctx, oncekv.Request{Handler: "bench", Key: string(key), Payload: benchValue},
					func(tx *oncekv.Tx) ([]byte, error) { return putEffect(tx, key) }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDuplicateApply: every call repeats one applied key. Compare with
// BenchmarkUniqueApply/durable/oncekv.
func BenchmarkDuplicateApply(b *testing.B) {
	db := openBench(b, false)
	ctx := context.Background()
	req := oncekv.Request{Handler: "bench", Key: "dup", Payload: benchValue}
	effect := func(tx *oncekv.Tx) ([]byte, error) { return putEffect(tx, []byte("dup")) }
	if _, err := db.Apply(ctx, req, effect); err != nil {
		b.Fatal(err)
	}
	before := db.Stats().Commits
	for b.Loop() {
		res, err := db.Apply(ctx, req, effect)
		if err != nil || !res.Duplicate {
			b.Fatal("not a duplicate", err)
		}
	}
	b.ReportMetric(float64(db.Stats().Commits-before)/float64(b.N), "commits/op")
}

// BenchmarkApplyBatch500 applies 500 new keys per op, durable: in one
// ApplyBatch, or as 500 Apply calls one after another.
func BenchmarkApplyBatch500(b *testing.B) {
	const size = 500
	b.Run("batch", func(b *testing.B) {
		db := openBench(b, false)
		ctx := context.Background()
		reqs := make([]oncekv.Request, size)
		keys := make([][]byte, size)
		var n uint64
		for b.Loop() {
			for j := range reqs {
				n++
				keys[j] = benchKey(n)
				reqs[j] = oncekv.Request{Handler: "bench", Key: string(keys[j]), Payload: benchValue}
			}
			if _, err := db.ApplyBatch(ctx, reqs, func(tx *oncekv.Tx, j int) ([]byte, error) { return putEffect(tx, keys[j]) }); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/request")
	})
	b.Run("single", func(b *testing.B) {
		db := openBench(b, false)
		ctx := context.Background()
		var n uint64
		for b.Loop() {
			for range size {
				n++
				key := benchKey(n)
				if _, err := db.Apply(ctx, oncekv.Request{Handler: "bench", Key: string(key), Payload: benchValue},
					func(tx *oncekv.Tx) ([]byte, error) { return putEffect(tx, key) }); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/request")
	})
}

// BenchmarkConcurrentApply: durable unique Apply from 1 goroutine and from 8,
// where group commit shares each fsync among the callers that arrived
// during the previous one. ns/op is per request, whatever the goroutines.
func BenchmarkConcurrentApply(b *testing.B) {
	for _, goroutines := range []int{1, 8} {
		b.Run(fmt.Sprintf("goroutines=%d", goroutines), func(b *testing.B) {
			db := openBench(b, false)
			ctx := context.Background()
			var next atomic.Uint64
			before := db.Stats().Commits
			b.ResetTimer()
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > uint64(b.N) {
							return
						}
						key := benchKey(i)
						if _, err := db.Apply(ctx, oncekv.Request{Handler: "bench", Key: string(key), Payload: benchValue},
							func(tx *oncekv.Tx) ([]byte, error) { return putEffect(tx, key) }); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/float64(db.Stats().Commits-before), "requests/commit")
		})
	}
}
