package oncekv_test

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
)

// The benchmarks here measure ratios, not absolute times: every iteration
// runs the baseline and the candidate back to back and times each, so
// whatever else the machine is doing slows both alike. Each reports the two
// per-operation times and their ratio. Run them with:
//
//	go test -run '^$' -bench . -benchtime 2000x .

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
	db, err := oncekv.Open(filepath.Join(b.TempDir(), "bench.db"), &oncekv.Options{NoSync: noSync, ExpireInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

// openBolt opens bare bbolt with the options oncekv gives it.
func openBolt(b *testing.B, noSync bool) *bolt.DB {
	b.Helper()
	db, err := bolt.Open(filepath.Join(b.TempDir(), "bolt.db"), 0o600, &bolt.Options{NoSync: noSync, FreelistType: bolt.FreelistMapType})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

// pair runs base and cand alternately b.N times each, each call doing ops
// operations, reports ns per operation of both and cand/base, and returns
// the total time of each.
func pair(b *testing.B, ops int, baseName string, base func(i uint64), candName string, cand func(i uint64)) (tBase, tCand time.Duration) {
	b.Helper()
	var i uint64
	for b.Loop() {
		i++
		start := time.Now()
		base(i)
		mid := time.Now()
		cand(i)
		tBase += mid.Sub(start)
		tCand += time.Since(mid)
	}
	n := float64(b.N * ops)
	b.ReportMetric(float64(tBase.Nanoseconds())/n, baseName+"-ns/op")
	b.ReportMetric(float64(tCand.Nanoseconds())/n, candName+"-ns/op")
	b.ReportMetric(float64(tCand)/float64(tBase), "ratio")
	return tBase, tCand
}

func applyUnique(b *testing.B, db *oncekv.DB, i uint64) {
	if err := tryApplyUnique(db, i); err != nil {
		b.Fatal(err)
	}
}

// tryApplyUnique is applyUnique for goroutines other than the benchmark's,
// which must not call b.Fatal.
func tryApplyUnique(db *oncekv.DB, i uint64) error {
	key := benchKey(i)
	_, err := db.Apply(context.Background(), oncekv.Request{Handler: "bench", Key: string(key), Payload: benchValue},
		func(tx *oncekv.Tx) ([]byte, error) { return putEffect(tx, key) })
	return err
}

// BenchmarkUniqueApplyVsBbolt: a new key per call, so every call commits;
// the baseline is bare bbolt's Update writing the same value. The ratio is
// what dedup adds: a second B-tree insert (the mark) in the same commit.
func BenchmarkUniqueApplyVsBbolt(b *testing.B) {
	for _, mode := range []struct {
		name   string
		noSync bool
	}{{"durable", false}, {"nosync", true}} {
		b.Run(mode.name, func(b *testing.B) {
			raw, db := openBolt(b, mode.noSync), openBench(b, mode.noSync)
			pair(b, 1, "bbolt", func(i uint64) {
				key := benchKey(i)
				if err := raw.Update(func(tx *bolt.Tx) error {
					bk, err := tx.CreateBucketIfNotExists([]byte("bench"))
					if err != nil {
						return err
					}
					return bk.Put(key, benchValue)
				}); err != nil {
					b.Fatal(err)
				}
			}, "oncekv", func(i uint64) { applyUnique(b, db, i) })
		})
	}
}

// BenchmarkDuplicateVsUniqueApply, durable: a duplicate is answered from a
// read transaction (no commit, no fsync); a unique key commits.
func BenchmarkDuplicateVsUniqueApply(b *testing.B) {
	db := openBench(b, false)
	ctx := context.Background()
	dup := oncekv.Request{Handler: "bench", Key: "dup", Payload: benchValue}
	effect := func(tx *oncekv.Tx) ([]byte, error) { return putEffect(tx, []byte("dup")) }
	if _, err := db.Apply(ctx, dup, effect); err != nil {
		b.Fatal(err)
	}
	commits := db.Stats().Commits
	const dups = 20 // duplicates are fast: time many per unique one
	tUnique, tDups := pair(b, 1, "unique", func(i uint64) { applyUnique(b, db, i) }, "20-duplicates", func(uint64) {
		for range dups {
			res, err := db.Apply(ctx, dup, effect)
			if err != nil || !res.Duplicate {
				b.Fatal("not a duplicate", err)
			}
		}
	})
	b.ReportMetric(float64(tUnique)*dups/float64(tDups), "duplicate-speedup")
	b.ReportMetric(float64(db.Stats().Commits-commits-uint64(b.N))/float64(b.N*dups), "commits/duplicate")
}

// BenchmarkApplyBatch500VsSingle, durable: 500 new keys in one ApplyBatch
// against 500 Apply calls one after another.
func BenchmarkApplyBatch500VsSingle(b *testing.B) {
	const size = 500
	db := openBench(b, false)
	ctx := context.Background()
	var next uint64
	keys := func() ([]oncekv.Request, [][]byte) {
		reqs, ks := make([]oncekv.Request, size), make([][]byte, size)
		for j := range reqs {
			next++
			ks[j] = benchKey(next)
			reqs[j] = oncekv.Request{Handler: "bench", Key: string(ks[j]), Payload: benchValue}
		}
		return reqs, ks
	}
	pair(b, size, "single", func(uint64) {
		for range size {
			next++
			applyUnique(b, db, next)
		}
	}, "batch", func(uint64) {
		reqs, ks := keys()
		if _, err := db.ApplyBatch(ctx, reqs, func(tx *oncekv.Tx, j int) ([]byte, error) { return putEffect(tx, ks[j]) }); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkConcurrentApply8Vs1, durable: 64 new keys applied by one
// goroutine against 64 applied by eight at once, where group commit shares
// each fsync among the callers that arrived during the previous one.
func BenchmarkConcurrentApply8Vs1(b *testing.B) {
	concurrent8Vs1(b, tryApplyUnique)
}

// concurrent8Vs1 times 64 calls of do on new keys by one goroutine against
// 64 by eight goroutines at once (see pair), and reports how many calls of
// the eight goroutines shared a commit.
func concurrent8Vs1(b *testing.B, do func(db *oncekv.DB, i uint64) error) {
	const perRound = 64
	db := openBench(b, false)
	var next uint64
	var mu sync.Mutex
	take := func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		next++
		return next
	}
	var calls, groupCommits uint64
	pair(b, perRound, "1-goroutine", func(uint64) {
		for range perRound {
			if err := do(db, take()); err != nil {
				b.Fatal(err)
			}
		}
	}, "8-goroutines", func(uint64) {
		before := db.Stats().Commits
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range perRound / 8 {
					if err := do(db, take()); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		groupCommits += db.Stats().Commits - before
		calls += perRound
	})
	b.ReportMetric(float64(calls)/float64(groupCommits), "calls/commit(8)")
}
