package oncekv

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
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

// writeLocked is write for a caller that holds writeMu. It is the only way
// oncekv writes: every write transaction goes through it.
func (db *DB) writeLocked(fn func(w *writeTx) error) error {
	if db.poisoned != nil {
		return db.poisoned
	}
	var w *writeTx
	var fnErr error
	txid := 0 // read inside: a closed bbolt Tx reports ID -1
	began := time.Now()
	// guard: a damaged page makes bbolt panic; the caller gets ErrCorrupt
	// (and, as for any commit that did not finish, the DB is poisoned).
	err := db.guard(func() error {
		return db.bolt.Update(func(btx *bolt.Tx) error {
			txid = btx.ID()
			w = &writeTx{db: db, btx: btx, tx: newTx(btx), now: db.clock.read()}
			db.current = w
			defer func() {
				db.current = nil
				w.tx.end()
			}()
			fnErr = fn(w)
			if fnErr == nil {
				db.crashAt(crashBeforeCommit)
			}
			return fnErr
		})
	})
	if w != nil {
		// Refused fenced writes count whether or not the transaction
		// committed: the refusal happened either way.
		db.stats.fencedWrites.Add(w.tx.life.Rejected())
	}
	if err != nil {
		if fnErr == nil && w != nil {
			// fn succeeded, so bbolt's commit itself failed: an I/O error.
			return db.commitFailedLocked(txid, err)
		}
		return err
	}
	db.stats.commits.Add(1)
	db.committedLocked(began, len(w.marked))
	db.learnLocked(w.marked)
	db.crashAt(crashAfterCommit)
	return nil
}

// commitFailedLocked decides what a failed bbolt commit of transaction txid
// leaves behind, and returns the error for the caller.
//
// bbolt rolls the transaction back in memory, but that does not undo what
// already reached the file: if the meta page was written and only its
// fdatasync failed, the transaction is visible through the mmap to every
// later reader, and may or may not be durable (after a failed fsync, Linux
// may have dropped the dirty pages, so a retry of the fsync proves
// nothing). The in-memory Bloom filters did not learn its keys, so a later
// write could miss its marks and run an effect twice. The only safe course
// is to refuse every further write until the file is reopened, which
// rebuilds all in-memory state from what is really there: the DB is
// poisoned. Reads keep working.
//
// One failure is left recoverable, because it is the common one and
// provably harmless: ENOSPC from writing the transaction's pages, before
// its meta page was written (the newest visible transaction is still the
// one before). Those pages are free pages that nothing refers to, so the
// store is exactly as before the call and writes resume once space is
// freed.
func (db *DB) commitFailedLocked(txid int, err error) error {
	var pe *fs.PathError
	pageWrite := errors.As(err, &pe) && pe.Op == "write"
	if errors.Is(err, syscall.ENOSPC) && pageWrite {
		visible := true
		if verr := db.bolt.View(func(btx *bolt.Tx) error {
			visible = btx.ID() >= txid
			return nil
		}); verr == nil && !visible {
			return fmt.Errorf("%w: %w", ErrNoSpace, err)
		}
	}
	db.poisoned = fmt.Errorf("%w: %w", ErrPoisoned, err)
	db.log.Error("commit failed; refusing writes until the database is reopened", "path", db.path, "err", err)
	return db.poisoned
}

// crashPoint names a place on the write path where the crash tests kill
// the process (see DB.crashHook).
type crashPoint uint8

const (
	crashClaimTaken   crashPoint = iota + 1 // Claim's IN_PROGRESS mark committed, before it returns
	crashBeforeEffect                       // inside the transaction, before an effect runs
	crashAfterEffect                        // the effect ran, its mark is not written yet
	crashBeforeCommit                       // everything written, bbolt's commit not begun
	crashAfterCommit                        // committed, before the caller hears of it
)

// crashAt calls the crash tests' hook, if any. In production it is one nil
// check per point.
func (db *DB) crashAt(p crashPoint) {
	if db.crashHook != nil {
		db.crashHook(p)
	}
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
