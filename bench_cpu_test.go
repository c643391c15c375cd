package oncekv_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
)

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
