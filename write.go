package oncekv

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/bucket"
)

// writeTx is one of oncekv's write transactions, with what it changed in the
// marks, so that in-memory state learns it only once the commit succeeded.
// With group commit a transaction can roll back and run again, so anything
// learned earlier could be wrong.
type writeTx struct {
	db  *DB
	btx *bolt.Tx
	tx  *Tx       // the user's view of the same transaction
	now time.Time // one reading of the monotonic clock for the whole transaction
	// marked lists the marks written, in order.
	marked []markedKey
	// written holds the hashes of the keys in marked, for findMark.
	written map[uint64]struct{}
	// opened lists windows this transaction created.
	opened map[int64]bool
}

type markedKey struct {
	window int64
	mkey   []byte
	fresh  bool // a new mark, not a rewrite of one
}

// write runs fn in a write transaction and commits it if fn returns nil.
func (db *DB) write(fn func(w *writeTx) error) error {
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	return db.writeLocked(fn)
}

// writeLocked is write for a caller that holds writeMu.
func (db *DB) writeLocked(fn func(w *writeTx) error) error {
	var w *writeTx
	err := db.bolt.Update(func(btx *bolt.Tx) error {
		w = &writeTx{db: db, btx: btx, tx: newTx(btx), now: db.clock.read()}
		db.current = w
		defer func() {
			db.current = nil
			w.tx.end()
		}()
		return fn(w)
	})
	if w != nil {
		// Refused fenced writes count whether or not the transaction
		// committed: the refusal happened either way.
		db.stats.fencedWrites.Add(w.tx.life.Rejected())
	}
	if err != nil {
		return err
	}
	db.stats.commits.Add(1)
	db.learnLocked(w.marked)
	return nil
}

// putMark writes the mark of mkey in the given window.
func (w *writeTx) putMark(window int64, mkey []byte, m *bucket.Mark) error {
	db := w.db
	if window < db.windows.Floor() {
		return fmt.Errorf("oncekv: write mark: window %v has expired", time.Unix(0, window).UTC())
	}
	if !w.opened[window] && db.windows.Find(window) == nil {
		if err := db.sealLocked(w.btx, window); err != nil {
			return err
		}
		if w.opened == nil {
			w.opened = map[int64]bool{}
		}
		w.opened[window] = true
	}
	fresh, err := bucket.PutMark(w.btx, window, mkey, m)
	if err != nil {
		return err
	}
	w.marked = append(w.marked, markedKey{window: window, mkey: mkey, fresh: fresh})
	if w.written == nil {
		w.written = map[uint64]struct{}{}
	}
	w.written[bloom.Sum64(mkey)] = struct{}{}
	return nil
}

// wrote reports whether this transaction may have written a mark for mkey.
func (w *writeTx) wrote(mkey []byte) bool {
	if len(w.written) == 0 {
		return false
	}
	_, ok := w.written[bloom.Sum64(mkey)]
	return ok
}
