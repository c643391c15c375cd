package oncekv_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
)

// BenchmarkUniqueApplyPagesPerBucket counts, commit by commit, which pages
// a unique Apply writes, by the bucket they belong to, against bare bbolt's
// Update writing the same 64-byte effect under the same ascending keys: it
// reads the file after each commit and walks the pages that are new since
// the commit before (bbolt copies every page it changes to a page of a new
// id, so a page id live before and after the commit is a page the commit
// did not write). Sync is off: the pages a commit writes are the same
// with it on, which adds only the fdatasyncs. Each live size preloads that
// many marks and effects first. Run it with:
//
//	go test -run '^$' -bench UniqueApplyPagesPerBucket -benchtime 2000x .
//
// docs/design/pages-per-commit.md has the table it printed.
func BenchmarkUniqueApplyPagesPerBucket(b *testing.B) {
	for _, live := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("live=%d", live), func(b *testing.B) {
			dir := b.TempDir()
			rawPath, ourPath := filepath.Join(dir, "bolt.db"), filepath.Join(dir, "oncekv.db")
			raw, err := bolt.Open(rawPath, 0o600, &bolt.Options{NoSync: true, FreelistType: bolt.FreelistMapType})
			if err != nil {
				b.Fatal(err)
			}
			defer raw.Close()
			db, err := oncekv.Open(ourPath, &oncekv.Options{NoSync: true, ExpireInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			preloadPages(b, raw, db, live)
			rawWalk, ourWalk := newPageWalk(b, rawPath), newPageWalk(b, ourPath)
			rawCounts, ourCounts := map[string]int{}, map[string]int{}
			bBefore, oBefore := raw.Stats().TxStats, oncekv.BoltTxStats(db)
			i := uint64(live)
			for b.Loop() {
				i++
				boltPuts(b, raw, benchKey(i), false)
				rawWalk.commit(b, rawCounts)
				applyUnique(b, db, i)
				ourWalk.commit(b, ourCounts)
			}
			bs, os := raw.Stats().TxStats, oncekv.BoltTxStats(db)
			bs, os = bs.Sub(&bBefore), os.Sub(&oBefore)
			n := float64(b.N)
			for _, side := range []struct {
				name   string
				counts map[string]int
				writes int64
			}{{"bbolt", rawCounts, bs.GetWrite()}, {"oncekv", ourCounts, os.GetWrite()}} {
				total := 0
				for _, class := range slices.Sorted(mapKeys(side.counts)) {
					total += side.counts[class]
					b.ReportMetric(float64(side.counts[class])/n, side.name+"-"+class+"/op")
				}
				b.ReportMetric(float64(total)/n, side.name+"-total/op")
				// bbolt's own count of page writes, for a check of the walk.
				b.ReportMetric(float64(side.writes)/n, side.name+"-txstats-writes/op")
			}
		})
	}
}

func mapKeys(m map[string]int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// preloadPages gives raw and db n effects (and db n marks) under the keys
// 1..n, in batches.
func preloadPages(b *testing.B, raw *bolt.DB, db *oncekv.DB, n int) {
	const batch = 1000
	for lo := 1; lo <= n; lo += batch {
		hi := min(lo+batch, n+1)
		if err := raw.Update(func(tx *bolt.Tx) error {
			bk, err := tx.CreateBucketIfNotExists([]byte("bench"))
			for i := lo; i < hi && err == nil; i++ {
				err = bk.Put(benchKey(uint64(i)), benchValue)
			}
			return err
		}); err != nil {
			b.Fatal(err)
		}
		reqs := make([]oncekv.Request, 0, hi-lo)
		for i := lo; i < hi; i++ {
			reqs = append(reqs, oncekv.Request{Handler: "bench", Key: string(benchKey(uint64(i))), Payload: benchValue})
		}
		res, err := db.ApplyBatch(context.Background(), reqs, func(tx *oncekv.Tx, j int) ([]byte, error) {
			return putEffect(tx, []byte(reqs[j].Key))
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
}

// pageWalk follows a bbolt file from commit to commit: the ids of its live
// pages, as of the last commit it saw.
type pageWalk struct {
	f        *os.File
	pageSize int
	live     map[uint64]bool
}

func newPageWalk(b *testing.B, path string) *pageWalk {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	w := &pageWalk{f: f, pageSize: 4096, live: map[uint64]bool{}}
	w.commit(b, map[string]int{}) // every page is new to an empty walk
	return w
}

func (w *pageWalk) page(b *testing.B, id uint64) []byte {
	p := make([]byte, w.pageSize)
	if _, err := w.f.ReadAt(p, int64(id)*int64(w.pageSize)); err != nil {
		b.Fatal(err)
	}
	if overflow := binary.LittleEndian.Uint32(p[12:]); overflow > 0 {
		p = make([]byte, w.pageSize*(1+int(overflow)))
		if _, err := w.f.ReadAt(p, int64(id)*int64(w.pageSize)); err != nil {
			b.Fatal(err)
		}
	}
	return p
}

// commit adds to counts the pages of the newest commit, by class: "meta"
// (the meta page, one per commit), "freelist", "root" (the root bucket's
// own pages) and the class of the root-level bucket a page belongs to
// (bucketClass).
func (w *pageWalk) commit(b *testing.B, counts map[string]int) {
	// The meta with the higher transaction id is the newest.
	var meta []byte
	for id := uint64(0); id < 2; id++ {
		p := w.page(b, id)
		if meta == nil || binary.LittleEndian.Uint64(p[16+48:]) > binary.LittleEndian.Uint64(meta[16+48:]) {
			meta = p
		}
	}
	counts["meta"]++
	m := meta[16:]
	root, freelist := binary.LittleEndian.Uint64(m[16:]), binary.LittleEndian.Uint64(m[32:])
	fl := w.page(b, freelist)
	counts["freelist"] += len(fl) / w.pageSize
	w.walk(b, root, "root", counts)
	// The freelist lists the free and pending pages: none is live.
	n, ids := int(binary.LittleEndian.Uint16(fl[10:])), fl[16:]
	if n == 0xFFFF {
		n, ids = int(binary.LittleEndian.Uint64(ids)), ids[8:]
	}
	for i := range n {
		delete(w.live, binary.LittleEndian.Uint64(ids[8*i:]))
	}
	delete(w.live, freelist)
}

// walk counts the pages under id not live before this commit, in class,
// and descends into them only: a page that did not change has no child
// that did.
func (w *pageWalk) walk(b *testing.B, id uint64, class string, counts map[string]int) {
	if w.live[id] {
		return
	}
	w.live[id] = true
	p := w.page(b, id)
	counts[class] += len(p) / w.pageSize
	flags, n := binary.LittleEndian.Uint16(p[8:]), int(binary.LittleEndian.Uint16(p[10:]))
	const branch, leaf, bucketLeaf = 0x01, 0x02, 0x01
	for i := range n {
		e := p[16+16*i:]
		switch {
		case flags&branch != 0:
			w.walk(b, binary.LittleEndian.Uint64(e[8:]), class, counts)
		case flags&leaf != 0 && binary.LittleEndian.Uint32(e)&bucketLeaf != 0:
			pos, ksize := binary.LittleEndian.Uint32(e[4:]), binary.LittleEndian.Uint32(e[8:])
			key := e[pos : pos+ksize]
			if child := binary.LittleEndian.Uint64(e[pos+ksize:]); child != 0 { // 0: inline, in this page
				sub := class
				if class == "root" {
					sub = bucketClass(string(key))
				}
				w.walk(b, child, sub, counts)
			}
		}
	}
}

// bucketClass names a root-level bucket for the table: every window is
// "window", the user buckets "user", the system buckets by name.
func bucketClass(name string) string {
	switch {
	case strings.HasPrefix(name, "oncekv.window/"):
		return "window"
	case strings.HasPrefix(name, "u/"), name == "bench":
		return "user"
	}
	return name
}

// stagedMark is the size of a DONE mark with a 2-byte response in the
// binary mark record (format 3 and later).
var stagedMark = make([]byte, 33)

// stagedLimit is how many bytes of an inline bucket bbolt keeps inline:
// a quarter page, page header included (Bucket.inlineable).
const stagedLimit = 4096 / 4

// boltStaged is a layout oncekv does not have, measured in bare bbolt: the
// effect as in boltPuts, and the mark first in a small bucket that bbolt
// keeps inline, in the root page each commit writes anyway; the commit
// whose mark would make it too large for that also moves every mark it
// holds into the marks bucket, one B-tree insert path for all of them.
// staged is the size of the inline bucket so far.
func boltStaged(b *testing.B, raw *bolt.DB, key []byte, staged *int) {
	err := raw.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists([]byte("bench"))
		if err == nil {
			err = bk.Put(key, benchValue)
		}
		if err != nil {
			return err
		}
		recent, err := tx.CreateBucketIfNotExists([]byte("recent"))
		if err != nil {
			return err
		}
		entry := 16 + len(key) + len(stagedMark)
		if *staged == 0 {
			*staged = 16
		}
		if *staged+entry > stagedLimit {
			marks, err := tx.CreateBucketIfNotExists([]byte("marks"))
			if err != nil {
				return err
			}
			var moved [][]byte
			c := recent.Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if err := marks.Put(k, v); err != nil {
					return err
				}
				moved = append(moved, k)
			}
			for _, k := range moved {
				if err := recent.Delete(k); err != nil {
					return err
				}
			}
			*staged = 16
		}
		*staged += entry
		return recent.Put(key, stagedMark)
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkBboltStagedMarksVsOne: bare bbolt's one insert against the two
// inserts of a unique Apply (effect and mark, as BenchmarkBboltTwoPutsVsOne)
// and against the staged layout of boltStaged, durable and sync off, each
// timed and its pages per commit counted: the ceiling a staged mark layout
// would give oncekv, measured before building it.
func BenchmarkBboltStagedMarksVsOne(b *testing.B) {
	for _, mode := range []struct {
		name   string
		noSync bool
	}{{"durable", false}, {"nosync", true}} {
		b.Run(mode.name, func(b *testing.B) {
			one, two, staged := openBolt(b, mode.noSync), openBolt(b, mode.noSync), openBolt(b, mode.noSync)
			s1, s2, s3 := one.Stats().TxStats, two.Stats().TxStats, staged.Stats().TxStats
			var tOne, tTwo, tStaged time.Duration
			var i uint64
			size := 0
			for b.Loop() {
				i++
				key := benchKey(i)
				t0 := time.Now()
				boltPuts(b, one, key, false)
				t1 := time.Now()
				boltPuts(b, two, key, true)
				t2 := time.Now()
				boltStaged(b, staged, key, &size)
				t3 := time.Now()
				tOne, tTwo, tStaged = tOne+t1.Sub(t0), tTwo+t2.Sub(t1), tStaged+t3.Sub(t2)
			}
			n := float64(b.N)
			e1, e2, e3 := one.Stats().TxStats, two.Stats().TxStats, staged.Stats().TxStats
			b.ReportMetric(float64(tOne.Nanoseconds())/n, "one-put-ns/op")
			b.ReportMetric(float64(tTwo.Nanoseconds())/n, "two-puts-ns/op")
			b.ReportMetric(float64(tStaged.Nanoseconds())/n, "staged-ns/op")
			b.ReportMetric(float64(tTwo)/float64(tOne), "ratio-two-puts")
			b.ReportMetric(float64(tStaged)/float64(tOne), "ratio-staged")
			d1, d2, d3 := e1.Sub(&s1), e2.Sub(&s2), e3.Sub(&s3)
			b.ReportMetric(float64(d1.GetWrite())/n, "one-put-pages/op")
			b.ReportMetric(float64(d2.GetWrite())/n, "two-puts-pages/op")
			b.ReportMetric(float64(d3.GetWrite())/n, "staged-pages/op")
		})
	}
}
