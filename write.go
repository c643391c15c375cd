package oncekv

import (
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bucket"
)

// writeTx is one of oncekv's write transactions, with what it changed in the
// marks, so that in-memory state learns it only once the commit succeeded.
// With group commit a transaction can roll back and run again, so anything
// learned earlier could be wrong.
type writeTx struct {
	btx *bolt.Tx
	tx  *Tx       // the user's view of the same transaction
	now time.Time // one clock reading for the whole transaction
	// marked lists the marks written, in order.
	marked []markedKey
}

type markedKey struct {
	window int64
	mkey   []byte
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
		w = &writeTx{btx: btx, tx: newTx(btx), now: db.opts.Now()}
		defer w.tx.end()
		return fn(w)
	})
	if err != nil {
		return err
	}
	db.stats.commits.Add(1)
	db.afterCommit(w)
	return nil
}

// afterCommit teaches the in-memory state what a committed transaction
// changed. It runs under writeMu, before the next writer starts.
func (db *DB) afterCommit(w *writeTx) {
	_ = w.marked // the Bloom filters learn these keys here
}

// putMark writes the mark of mkey in the given window.
func (w *writeTx) putMark(window int64, mkey []byte, m *bucket.Mark) error {
	if err := bucket.PutMark(w.btx, window, mkey, m); err != nil {
		return err
	}
	w.marked = append(w.marked, markedKey{window: window, mkey: mkey})
	return nil
}

// findMark is the one look-up of a key's mark that every path uses.
func (db *DB) findMark(btx *bolt.Tx, mkey []byte) (*bucket.FoundMark, error) {
	return bucket.FindMark(btx, mkey)
}
