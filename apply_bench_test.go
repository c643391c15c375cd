package oncekv_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
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

// BenchmarkUniqueApplyPagesVsBbolt, sync off: what one commit of a unique
// Apply makes bbolt do (pages written, nodes spilled, splits), against bare
// bbolt's Update writing the same value, so that the structural part of the
// CPU ratio of BenchmarkUniqueApplyVsBbolt (the mark is a second B-tree
// insert) is told apart from oncekv's own. Times as in pair.
func BenchmarkUniqueApplyPagesVsBbolt(b *testing.B) {
	raw, db := openBolt(b, true), openBench(b, true)
	bBefore, oBefore := raw.Stats().TxStats, oncekv.BoltTxStats(db)
	pair(b, 1, "bbolt", func(i uint64) { boltPuts(b, raw, benchKey(i), false) },
		"oncekv", func(i uint64) { applyUnique(b, db, i) })
	bs, os := raw.Stats().TxStats, oncekv.BoltTxStats(db)
	bs, os = bs.Sub(&bBefore), os.Sub(&oBefore)
	n := float64(b.N)
	for _, m := range []struct {
		name     string
		raw, our int64
	}{
		{"pages-written", bs.GetWrite(), os.GetWrite()},
		{"nodes-spilled", bs.GetSpill(), os.GetSpill()},
		{"nodes-read", bs.GetNodeCount(), os.GetNodeCount()},
		{"pages-allocated", bs.GetPageCount(), os.GetPageCount()},
		{"splits", bs.GetSplit(), os.GetSplit()},
	} {
		b.ReportMetric(float64(m.raw)/n, "bbolt-"+m.name+"/op")
		b.ReportMetric(float64(m.our)/n, "oncekv-"+m.name+"/op")
	}
}

// BenchmarkUniqueApplyNoSync times unique Apply calls alone, sync off, one
// caller: the path whose CPU BenchmarkUniqueApplyVsBbolt compares with bare
// bbolt's, here without the baseline, for a profile of oncekv's share and
// its allocations per call.
func BenchmarkUniqueApplyNoSync(b *testing.B) {
	db := openBench(b, true)
	b.ReportAllocs()
	var i uint64
	for b.Loop() {
		i++
		applyUnique(b, db, i)
	}
}

// boltPuts writes key's 64-byte value in bare bbolt in one Update, and with
// mark also a mark-sized value under the same key in a second top-level
// bucket, as oncekv lays out a user bucket and a window of marks.
func boltPuts(b *testing.B, raw *bolt.DB, key []byte, mark bool) {
	err := raw.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists([]byte("bench"))
		if err == nil {
			err = bk.Put(key, benchValue)
		}
		if err != nil || !mark {
			return err
		}
		if bk, err = tx.CreateBucketIfNotExists([]byte("marks")); err != nil {
			return err
		}
		return bk.Put(key, benchMark)
	})
	if err != nil {
		b.Fatal(err)
	}
}

// benchMark is the size of a DONE mark with a 2-byte response today (74
// bytes in format version 2).
var benchMark = make([]byte, 74)

// BenchmarkBboltTwoPutsVsOne, sync off: the structural part of a unique
// Apply's cost, what bare bbolt pays for a second insert (a mark-sized value
// in a second bucket) in the same Update, against the one insert of
// BenchmarkUniqueApplyVsBbolt's baseline.
func BenchmarkBboltTwoPutsVsOne(b *testing.B) {
	one, two := openBolt(b, true), openBolt(b, true)
	pair(b, 1, "one-put", func(i uint64) { boltPuts(b, one, benchKey(i), false) },
		"two-puts", func(i uint64) { boltPuts(b, two, benchKey(i), true) })
}

// BenchmarkUniqueApplyVsBboltTwoPuts, sync off: a unique Apply against bare
// bbolt doing the same two inserts in one Update; the ratio is oncekv's own
// share (hashing, encoding, filters, group commit, bookkeeping).
func BenchmarkUniqueApplyVsBboltTwoPuts(b *testing.B) {
	raw, db := openBolt(b, true), openBench(b, true)
	pair(b, 1, "bbolt-two-puts", func(i uint64) { boltPuts(b, raw, benchKey(i), true) },
		"oncekv", func(i uint64) { applyUnique(b, db, i) })
}

// BenchmarkUniqueApplyCPUVsBbolt, sync off: BenchmarkUniqueApplyVsBbolt
// and BenchmarkUniqueApplyVsBboltTwoPuts timed in process CPU time rather
// than wall time, the two bbolt baselines and oncekv in turn, so that the
// ratios hold on a machine shared with other work. Work of the runtime's
// own threads (GC) counts for whichever call it ran during.
func BenchmarkUniqueApplyCPUVsBbolt(b *testing.B) {
	if !haveCPUTime {
		b.Skip("no process CPU time on this platform")
	}
	one, two, db := openBolt(b, true), openBolt(b, true), openBench(b, true)
	var tOne, tTwo, tOurs time.Duration
	var i uint64
	for b.Loop() {
		i++
		key := benchKey(i)
		t0 := cpuTime()
		boltPuts(b, one, key, false)
		t1 := cpuTime()
		boltPuts(b, two, key, true)
		t2 := cpuTime()
		applyUnique(b, db, i)
		t3 := cpuTime()
		tOne, tTwo, tOurs = tOne+t1-t0, tTwo+t2-t1, tOurs+t3-t2
	}
	n := float64(b.N)
	b.ReportMetric(float64(tOne.Nanoseconds())/n, "bbolt-cpu-ns/op")
	b.ReportMetric(float64(tTwo.Nanoseconds())/n, "bbolt-two-puts-cpu-ns/op")
	b.ReportMetric(float64(tOurs.Nanoseconds())/n, "oncekv-cpu-ns/op")
	b.ReportMetric(float64(tOurs)/float64(tOne), "ratio")
	b.ReportMetric(float64(tOurs)/float64(tTwo), "ratio-two-puts")
	b.ReportMetric(float64(tTwo)/float64(tOne), "ratio-structural")
}

// BenchmarkConcurrentApply8NoSync, sync off: eight goroutines applying new
// keys at once, in process CPU time per call, with the calls per commit
// that group commit reached: the cost of the group hand-off and of running
// each effect of a shared commit on a goroutine of its own.
func BenchmarkConcurrentApply8NoSync(b *testing.B) {
	const per = 8
	db := openBench(b, true)
	var next atomic.Uint64
	commits := db.Stats().Commits
	var cpu time.Duration
	for b.Loop() {
		t0 := cpuTime()
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range per {
					if err := tryApplyUnique(db, next.Add(1)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		cpu += cpuTime() - t0
	}
	calls := float64(b.N * 8 * per)
	b.ReportMetric(float64(cpu.Nanoseconds())/calls, "cpu-ns/call")
	b.ReportMetric(calls/float64(db.Stats().Commits-commits), "calls/commit")
}

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

// loadDuplicates is loadDuplicatesN of dupKeys keys.
func loadDuplicates(b *testing.B, db *oncekv.DB, response []byte) []oncekv.Request {
	b.Helper()
	return loadDuplicatesN(b, db, dupKeys, response)
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
