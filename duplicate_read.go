package oncekv

import (
	"context"
	"math"
	"time"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/windowset"
)

// The duplicate read path: a request the duplicate cache cannot answer is
// looked up in a shared snapshot (snapshot.go), and a single Apply whose
// key holds a final mark there is answered without an op on the heap
// (docs/design/duplicate-reads.md).

// readAnswer is what applyFromSnapshot did with a request.
type readAnswer uint8

const (
	// readUnknown: not answered, and nothing learnt; the ordinary way
	// looks again.
	readUnknown readAnswer = iota
	// readAbsent: no mark in the snapshot; the ordinary way need look only
	// in the windows starting at or after the returned checkFrom.
	readAbsent
	// readAnswered: the result is the request's.
	readAnswered
)

// applyFromSnapshot answers a single Apply from a shared snapshot when it
// holds a final (DONE or FAILED) mark of the key, allocating only the
// response's copy; applyFromCache has missed. Claims, parked keys, errors
// and keys too long for buf go the ordinary way, which looks again.
func (db *DB) applyFromSnapshot(ctx context.Context, req *Request, buf *[cachedKeySize]byte) (Result, readAnswer, int64, error) {
	if req.Handler == "" || req.Key == "" || len(req.Handler)+len(req.Key) > len(buf)-2 || db.snaps.own {
		return Result{}, readUnknown, 0, nil
	}
	mkey := layout.AppendMarkKey(buf[:0], req.Handler, req.Key)
	h := bloom.Sum64(mkey)
	live := db.live.Windows()
	sealedBelow := sealedBelowOf(live)
	if !db.mayHaveMark(live, h) {
		return Result{}, readAbsent, sealedBelow, nil // certainly unseen
	}
	sn, err := db.acquireSnapshot()
	if err != nil {
		return Result{}, readUnknown, 0, nil // the ordinary way meets it again
	}
	var m layout.FoundMark
	var counts lookupCounts
	found := false
	err = db.guard(func() (err error) {
		found, err = db.findInSnapshot(sn, live, mkey, h, &m, &counts)
		return err
	})
	epoch := sn.epoch
	if err != nil {
		_ = sn.btx.Rollback() // not handed back: it may have met a damaged page
		return Result{}, readUnknown, 0, nil
	}
	db.releaseSnapshot(sn)
	if !found {
		db.addLookupCounts(counts)
		return Result{}, readAbsent, sealedBelow, nil
	}
	if m.State != layout.Done && m.State != layout.Failed {
		return Result{}, readUnknown, 0, nil
	}
	// Only what answer reads: pointers in o would escape to the heap.
	var o op
	if o.hash, err = fingerprint(req); err != nil {
		return Result{}, readUnknown, 0, nil // bad input: the ordinary way says so
	}
	db.addLookupCounts(counts)
	o.answer(&m, time.Time{}) // final: the time does not matter
	db.offerMark(epoch, h, mkey, req, o.hash, &m)
	res, err := db.settleOutcome(ctx, req.Handler, req.Key, o.kind, o.res, o.err)
	return res, readAnswered, 0, err
}

// findInSnapshot is lookIn for a shared snapshot: it decodes the key's mark
// into m and reports whether there is one, adding the live windows' filter
// answers to counts (those of the tombstone windows are counted at once).
func (db *DB) findInSnapshot(sn *snapshot, live []*windowset.Live, mkey []byte, h uint64, m *layout.FoundMark, counts *lookupCounts) (bool, error) {
	for i := len(live) - 1; i >= 0; i-- {
		w := live[i]
		if w.Filter != nil && !db.filterMayContain(w.Filter, h) {
			counts.bloomNegatives++
			continue
		}
		if raw := sn.mark(w.Start, mkey); raw != nil {
			return true, layout.DecodeMark(raw, w.Start, mkey, m)
		}
		if w.Filter != nil {
			counts.bloomFalsePositives++
		}
	}
	t, err := db.lookInTombs(sn.btx, mkey, h)
	if t == nil || err != nil {
		return false, err
	}
	*m = *t
	return true, nil
}

// addLookupCounts publishes a read's filter answers, touching the shared
// counters only when there is something to add.
func (db *DB) addLookupCounts(c lookupCounts) {
	if c.bloomNegatives != 0 {
		db.stats.bloomNegatives.Add(c.bloomNegatives)
	}
	if c.bloomFalsePositives != 0 {
		db.stats.bloomFalsePositives.Add(c.bloomFalsePositives)
	}
}

// sealedBelowOf returns the start of the newest of live, before which every
// window was sealed when live was read (math.MinInt64 for none).
func sealedBelowOf(live []*windowset.Live) int64 {
	if len(live) == 0 {
		return math.MinInt64
	}
	return live[len(live)-1].Start
}
