package oncekv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/bloom"
	"github.com/oncekv/oncekv/internal/layout"
)

// writeTx is one write transaction and what it changed in the marks, which
// the in-memory state learns only after the commit: a group transaction may
// roll back and run again.
type writeTx struct {
	db  *DB
	btx *bolt.Tx
	tx  *Tx       // the user's view of the same transaction
	now time.Time // one reading of the monotonic clock for the whole transaction
	// marked lists the marks written, in order.
	marked []markedKey
	// written indexes marked by hash once it holds more than scanMarked.
	written map[uint64]struct{}
	// opened lists windows this transaction created.
	opened map[int64]bool
	// unmarked lists the windows of the marks deleted, one entry per mark.
	unmarked []int64
	// pinned are the keys kept out of the duplicate cache until w ends (see
	// pin); finals, the final marks to cache after the commit.
	pinned []uint64
	finals []finalMark
	// bloomNegatives and bloomFalsePositives count w's filter answers.
	bloomNegatives, bloomFalsePositives uint64
	// clockSaved: this transaction saves the store's clock (saveClockLocked).
	clockSaved bool
	// hooks are OnCommit's, for write's caller; owner is the op whose effect
	// is running, which gets its own.
	hooks []func()
	owner *op
	// txv and markedBuf spare a one-request commit two allocations.
	txv       Tx
	markedBuf [1]markedKey
}

// scanMarked is the most marks wrote scans one by one.
const scanMarked = 8

// writeLock is the store's write lock: a one-slot semaphore, so that a
// caller can stop waiting when its context ends.
type writeLock chan struct{}

func newWriteLock() writeLock { return make(writeLock, 1) }

// Lock takes the lock, waiting as long as it takes.
func (l writeLock) Lock() { l <- struct{}{} }

// LockContext takes the lock, or returns ctx's error if ctx ends first.
func (l writeLock) LockContext(ctx context.Context) error {
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unlock releases the lock.
func (l writeLock) Unlock() { <-l }

type markedKey struct {
	window     int64
	mkey       []byte
	hash       uint64 // bloom.Sum64(mkey), hashed once when the mark is written
	fresh      bool   // a new mark, not a rewrite of one
	removed    bool   // moved out of window (see rewriteMark)
	leaseUntil int64  // a new latest lease end of window, recorded; else 0
}

// write runs fn in a write transaction and commits it if fn returns nil.
func (db *DB) write(fn func(w *writeTx) error) error {
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	return db.writeLocked(fn)
}

// writeLocked is write for a caller holding writeMu: every write
// transaction of oncekv goes through it. In-memory state learns what it
// wrote after the commit, under writeMu; a failed commit may poison the DB.
func (db *DB) writeLocked(fn func(w *writeTx) error) error {
	if db.opts.ReadOnly {
		return ErrReadOnly
	}
	if db.poisoned != nil {
		return db.poisoned
	}
	// Before bbolt's write lock: no idle snapshot may hold the mmap lock
	// while the commit remaps, and none opened before it answers after.
	db.snaps.beginWrite()
	defer db.snaps.endWrite() // runs last: after the in-memory state learnt
	var w *writeTx
	var fnErr error
	txid := 0 // read inside: a closed bbolt Tx reports ID -1
	defer func() {
		// Unpinned however the transaction ended, runtime.Goexit included.
		if w != nil {
			db.dups.Unpin(w.pinned)
		}
	}()
	began := time.Now()
	// guard: a damaged page makes bbolt panic; the caller gets ErrCorrupt,
	// and the DB is poisoned as for any commit that did not finish.
	err := db.guard(func() error {
		return db.bolt.Update(func(btx *bolt.Tx) error {
			txid = btx.ID()
			now := db.clock.last()
			if !db.closing {
				now = db.clock.read()
			}
			w = &writeTx{db: db, btx: btx, now: now}
			w.txv.btx, w.txv.w = btx, w
			w.tx, w.marked = &w.txv, w.markedBuf[:0]
			db.current = w
			defer func() {
				db.current = nil
				w.tx.end()
			}()
			if fnErr = db.saveClockLocked(w); fnErr != nil {
				return fnErr
			}
			fnErr = fn(w)
			if fnErr == nil {
				db.crashAt(crashBeforeCommit)
			}
			return fnErr
		})
	})
	if w != nil && fnErr != errRetry { // compared, not errors.Is: fnErr may be the caller's error, whose methods are not ours to call here
		// Counted whether or not it committed: this was its only run. A
		// rolled-back group attempt counts only its failed op.
		db.stats.addCounts(w.counts())
	}
	if err != nil {
		if fnErr == nil && w != nil {
			// fn succeeded, so bbolt's commit itself failed: an I/O error.
			return db.commitFailedLocked(txid, err)
		}
		return err
	}
	db.stats.commits.Add(1)
	if w.clockSaved {
		db.clockSaved = w.now.UnixNano()
	}
	db.committedLocked(began, len(w.marked))
	db.learnLocked(w.marked)
	db.cacheFinalsLocked(w)
	db.unlearnLocked(w.unmarked)
	db.crashAt(crashAfterCommit)
	return nil
}

// commitFailedLocked returns the error of transaction txid's failed bbolt
// commit. The transaction may be visible and durable or not, so the DB is
// poisoned: writes are refused until reopened. ENOSPC while writing pages,
// before the transaction became visible, left nothing and returns
// ErrNoSpace instead (docs/design/poisoning-and-enospc.md).
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

// crashPoint is a place on the write path where the crash tests kill the
// process (DB.crashHook).
type crashPoint uint8

const (
	crashClaimTaken   crashPoint = iota + 1 // Claim's IN_PROGRESS mark committed, before it returns
	crashBeforeEffect                       // inside the transaction, before an effect runs
	crashAfterEffect                        // the effect ran, its mark is not written yet
	crashBeforeCommit                       // everything written, bbolt's commit not begun
	crashAfterCommit                        // committed, before the caller hears of it
)

// crashAt calls the crash tests' hook, if any.
func (db *DB) crashAt(p crashPoint) {
	if db.crashHook != nil {
		db.crashHook(p)
	}
}

// putMark writes the mark of mkey in the given window.
func (w *writeTx) putMark(window int64, mkey []byte, m *layout.Mark) error {
	db := w.db
	if window < db.live.Floor() {
		return fmt.Errorf("oncekv: write mark: window %v has expired", time.Unix(0, window).UTC())
	}
	if !w.opened[window] && db.live.Find(window) == nil {
		if err := db.sealLocked(w.btx, window); err != nil {
			return err
		}
		if w.opened == nil {
			w.opened = map[int64]bool{}
		}
		w.opened[window] = true
	}
	fresh, err := layout.PutMark(w.btx, window, mkey, m)
	if err != nil {
		return err
	}
	h := bloom.Sum64(mkey)
	if !fresh {
		w.pin(h)
	}
	w.noteFinal(h, window, mkey, m)
	w.marked = append(w.marked, markedKey{window: window, mkey: mkey, hash: h, fresh: fresh})
	switch {
	case w.written != nil:
		w.written[h] = struct{}{}
	case len(w.marked) > scanMarked:
		w.written = make(map[uint64]struct{}, 2*len(w.marked))
		for _, m := range w.marked {
			if !m.removed {
				w.written[m.hash] = struct{}{}
			}
		}
	}
	return nil
}

// deleteMark deletes mkey's mark from window, if any; the window's count
// follows after the commit.
func (w *writeTx) deleteMark(window int64, mkey []byte) error {
	deleted, err := layout.DeleteMark(w.btx, window, mkey)
	if err != nil {
		return err
	}
	if deleted {
		w.pin(bloom.Sum64(mkey))
		w.unmarked = append(w.unmarked, window)
	}
	return nil
}

// wrote reports whether this transaction may have written a mark for mkey.
func (w *writeTx) wrote(mkey []byte) bool {
	return len(w.marked) > 0 && w.wroteHash(bloom.Sum64(mkey))
}

// wroteHash is wrote for a mark key hashed h (bloom.Sum64).
func (w *writeTx) wroteHash(h uint64) bool {
	if w.written != nil {
		_, ok := w.written[h]
		return ok
	}
	for _, m := range w.marked {
		if m.hash == h && !m.removed {
			return true
		}
	}
	return false
}
