package oncekv

import (
	"bytes"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/layout"
)

// The read snapshots that duplicate look-ups share (DB.snaps): a read
// transaction opened for one look-up is kept for the next, until a commit
// begins (docs/design/duplicate-reads.md).

// snapshot is a bbolt read transaction kept for more than one look-up, by
// one goroutine at a time, with the window buckets it opened.
type snapshot struct {
	btx *bolt.Tx
	// gen is snapshots.gen, and epoch the duplicate cache's epoch, both
	// read before the transaction began.
	gen, epoch uint64
	// wins are the window buckets looked in so far, each with a cursor to
	// seek again; a nil cursor: no such bucket in this snapshot.
	wins []snapWindow
}

type snapWindow struct {
	start int64
	c     *bolt.Cursor
}

// mark returns the raw mark of mkey in the window starting at start, or
// nil: bolt.Bucket.Get's answer, with the bucket and its cursor kept.
func (s *snapshot) mark(start int64, mkey []byte) []byte {
	var c *bolt.Cursor
	found := false
	for i := range s.wins {
		if s.wins[i].start == start {
			c, found = s.wins[i].c, true
			break
		}
	}
	if !found {
		if b := s.btx.Bucket(layout.WindowName(start)); b != nil {
			c = b.Cursor()
		}
		s.wins = append(s.wins, snapWindow{start, c})
	}
	if c == nil {
		return nil
	}
	k, v := c.Seek(mkey)
	if v == nil || !bytes.Equal(k, mkey) {
		return nil // a nil value is a nested bucket's: Get answers nil too
	}
	return v
}

// snapshots hands out snapshots: an idle one if no commit has begun since
// it was opened, else a new one. A commit drains the idle ones first, so
// that none is open while bbolt may remap the file, which waits for every
// read transaction (docs/design/mmap-and-readers.md). The idle ones sit in
// slots taken and filled with compare-and-swap, so that concurrent readers
// do not queue on a lock (docs/design/duplicate-reads.md).
type snapshots struct {
	// gen is odd while a write transaction is under way; every write
	// transaction adds one before and one after.
	gen   atomic.Uint64
	slots [maxIdleSnapshots]atomic.Pointer[snapshot]
	// closed: the store is closing, so nothing is kept any more.
	closed atomic.Bool
	// own, set by benchmarks only, keeps nothing, and makes a single Apply
	// skip applyFromSnapshot: every look-up opens and rolls back its own
	// read transaction, as before snapshots were shared.
	own bool
}

// maxIdleSnapshots bounds the idle snapshots kept: more concurrent readers
// than this open and roll back their own.
const maxIdleSnapshots = 16

// acquireSnapshot returns a snapshot for the caller alone, to hand back
// with releaseSnapshot. It sees every commit that returned before
// acquireSnapshot was called.
func (db *DB) acquireSnapshot() (*snapshot, error) {
	s := &db.snaps
	gen := s.gen.Load()
	for i := range s.slots {
		sn := s.slots[i].Load()
		if sn == nil || !s.slots[i].CompareAndSwap(sn, nil) {
			continue
		}
		if sn.gen == gen {
			return sn, nil
		}
		// Pushed back as a write transaction began (see releaseSnapshot).
		_ = sn.btx.Rollback()
	}
	// Both read before the transaction begins: a commit after them makes
	// the snapshot stale (gen) and its marks uncacheable (epoch).
	epoch := db.dups.Epoch()
	btx, err := db.bolt.Begin(false)
	if err != nil {
		return nil, err
	}
	return &snapshot{btx: btx, gen: gen, epoch: epoch}, nil
}

// releaseSnapshot hands sn back: kept idle when no write transaction began
// since it was opened, else rolled back. A snapshot whose look-up panicked
// (a damaged page) is not handed back.
func (db *DB) releaseSnapshot(sn *snapshot) {
	s := &db.snaps
	if !s.own && sn.gen&1 == 0 && !s.closed.Load() && sn.gen == s.gen.Load() {
		for i := range s.slots {
			if !s.slots[i].CompareAndSwap(nil, sn) {
				continue
			}
			// A write transaction (or Close) that began just before the push
			// may have swept slot i already: take sn back, unless someone else
			// did (a reader that takes a stale one rolls it back).
			if (sn.gen != s.gen.Load() || s.closed.Load()) && s.slots[i].CompareAndSwap(sn, nil) {
				_ = sn.btx.Rollback()
			}
			return
		}
	}
	_ = sn.btx.Rollback()
}

// beginWrite is called under writeMu before every write transaction:
// snapshots opened before it are stale from now on, and the idle ones are
// rolled back, so that no idle reader holds bbolt's mmap lock while the
// commit may need to remap the file.
func (s *snapshots) beginWrite() {
	s.gen.Add(1)
	s.drain()
}

// endWrite is called under writeMu once the write transaction has ended and
// the in-memory state has learnt from it, before its callers hear of it:
// snapshots opened from now on may be kept again.
func (s *snapshots) endWrite() { s.gen.Add(1) }

// close rolls back the idle snapshots and keeps no more, for Close: bbolt's
// Close waits for every read transaction.
func (s *snapshots) close() {
	s.closed.Store(true)
	s.drain()
}

// drain rolls back every idle snapshot; the caller has made them stale or
// unwanted first, so that none is pushed back for good behind it.
func (s *snapshots) drain() {
	for i := range s.slots {
		if sn := s.slots[i].Swap(nil); sn != nil {
			_ = sn.btx.Rollback()
		}
	}
}
