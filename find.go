package oncekv

import (
	"math"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/windowset"
)

// findMark is the one look-up of a key's mark every path uses: the live
// windows newest first, skipping a window whose filter rules the key out;
// a "maybe" is confirmed by the exact look-up. A key the current
// transaction wrote is looked up in every window, as the filters learn
// only after the commit.
func (db *DB) findMark(btx *bolt.Tx, mkey []byte) (*layout.FoundMark, error) {
	return db.findMarkFrom(btx, mkey, bloom.Sum64(mkey), math.MinInt64)
}

// findMarkFrom is findMark for a request whose snapshot found nothing in
// the windows starting before from: those were sealed, and a sealed window
// never gains a key (docs/design/windows-and-filters.md). h is
// bloom.Sum64(mkey).
func (db *DB) findMarkFrom(btx *bolt.Tx, mkey []byte, h uint64, from int64) (*layout.FoundMark, error) {
	if btx.Writable() && db.current != nil && db.current.wroteHash(h) {
		m, err := layout.FindMark(btx, mkey, db.live.Floor())
		if m == nil && err == nil {
			return db.lookInTombs(btx, mkey, h)
		}
		return db.releaseOrphan(m), err
	}
	return db.lookIn(btx, db.live.Windows(), mkey, h, from)
}

// lookIn is findMarkFrom in the windows of live, then in every tombstone
// window (tombstones.go), for a read transaction or a write transaction
// that did not write the key.
func (db *DB) lookIn(btx *bolt.Tx, live []*windowset.Live, mkey []byte, h uint64, from int64) (*layout.FoundMark, error) {
	for i := len(live) - 1; i >= 0 && live[i].Start >= from; i-- {
		w := live[i]
		if w.Filter != nil && !db.filterMayContain(w.Filter, h) {
			db.countLookup(btx, true)
			continue
		}
		b := btx.Bucket(layout.WindowName(w.Start))
		if b == nil {
			continue // created after this snapshot, or being expired
		}
		m, err := layout.GetMark(b, w.Start, mkey)
		if m != nil || err != nil {
			return db.releaseOrphan(m), err
		}
		if w.Filter != nil {
			db.countLookup(btx, false)
		}
	}
	return db.lookInTombs(btx, mkey, h)
}
