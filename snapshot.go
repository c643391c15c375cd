package oncekv

import (
	"bytes"
	"sync"
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
// read transaction (docs/design/mmap-and-readers.md).
type snapshots struct {
	// gen is odd while a write transaction is under way; every write
	// transaction adds one before and one after.
	gen  atomic.Uint64
	mu   sync.Mutex
	idle []*snapshot
	// closed: the store is closing, so nothing is kept any more.
	closed bool
	// own, set by benchmarks only, keeps nothing, and makes a single Apply
	// skip applyFromSnapshot: every look-up opens and rolls back its own
	// read transaction, as before snapshots were shared.
	own bool
}

// maxIdleSnapshots bounds the idle snapshots kept: more concurrent readers
// than this open and roll back their own.
const maxIdleSnapshots = 16

// acquire returns a snapshot for the caller alone, to hand back with
// release. It sees every commit that returned before acquire was called.
func (db *DB) acquireSnapshot() (*snapshot, error) {
	s := &db.snaps
	s.mu.Lock()
	gen := s.gen.Load()
	if n := len(s.idle); n > 0 && !s.own {
		sn := s.idle[n-1]
		s.idle[n-1] = nil
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		if sn.gen == gen {
			return sn, nil
		}
		_ = sn.btx.Rollback() // cannot happen: beginWrite drains under mu
	} else {
		s.mu.Unlock()
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
	s.mu.Lock()
	if !s.closed && !s.own && sn.gen&1 == 0 && sn.gen == s.gen.Load() && len(s.idle) < maxIdleSnapshots {
		s.idle = append(s.idle, sn)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	_ = sn.btx.Rollback()
}

// beginWrite is called under writeMu before every write transaction:
// snapshots opened before it are stale from now on, and the idle ones are
// rolled back, so that no idle reader holds bbolt's mmap lock while the
// commit may need to remap the file.
func (s *snapshots) beginWrite() {
	s.mu.Lock()
	s.gen.Add(1)
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	for _, sn := range idle {
		_ = sn.btx.Rollback()
	}
}

// endWrite is called under writeMu once the write transaction has ended and
// the in-memory state has learnt from it, before its callers hear of it:
// snapshots opened from now on may be kept again.
func (s *snapshots) endWrite() { s.gen.Add(1) }

// close rolls back the idle snapshots and keeps no more, for Close: bbolt's
// Close waits for every read transaction.
func (s *snapshots) close() {
	s.mu.Lock()
	s.closed = true
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	for _, sn := range idle {
		_ = sn.btx.Rollback()
	}
}
