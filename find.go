package oncekv

import (
	"math"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/windowset"
)

// findMark is the one look-up of a key's mark that every path uses. It looks
// in the live windows newest first, and skips a window whose filter says the
// key is definitely not there. A positive answer is always confirmed by the
// exact look-up, so a false positive costs one B-tree read and never drops a
// request.
//
// The filters know every committed mark: a write transaction teaches them
// its marks after it commits and before the next writer starts. What they
// cannot know is a mark written earlier in the same, still open,
// transaction (an earlier request of the same group or batch), so for a key
// written in the current transaction the look-up reads every window.
func (db *DB) findMark(btx *bolt.Tx, mkey []byte) (*layout.FoundMark, error) {
	return db.findMarkFrom(btx, mkey, bloom.Sum64(mkey), math.MinInt64)
}

// findMarkFrom is findMark for a request that has already looked, in an
// earlier snapshot, in every window starting before from, and found nothing.
// Those windows were sealed then: a new mark only ever goes into the newest
// window, and a mark that moves (see rewriteMark) into the newest or a newer
// one, so a sealed window never gains a key, and what a snapshot did not
// find there is not there now. The write path of such a request looks only
// in the window or two that can still change, so its cost does not grow
// with the number of live windows. h is bloom.Sum64(mkey), which the
// request hashed once.
func (db *DB) findMarkFrom(btx *bolt.Tx, mkey []byte, h uint64, from int64) (*layout.FoundMark, error) {
	if btx.Writable() && db.current != nil && db.current.wroteHash(h) {
		m, err := layout.FindMark(btx, mkey, db.live.Floor())
		return db.releaseOrphan(m), err
	}
	return db.lookIn(btx, db.live.Windows(), mkey, h, from)
}

// lookIn is findMarkFrom in the windows of live (as db.live listed them
// at some point) only, for a read transaction, or for a write transaction
// whose own marks do not include the key's.
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
	return nil, nil
}
