package oncekv

import (
	"context"
	"log/slog"
	"sync"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/dupcache"
	"github.com/oncekv/oncekv/internal/windowset"
	"github.com/oncekv/oncekv/window"
)

// DB is an open oncekv store: one bbolt file holding user buckets, dedup
// marks and fences. A DB is safe for concurrent use by many goroutines. Only
// one DB may have a file open at a time, across all processes.
type DB struct {
	path         string
	opts         Options
	windowConfig window.Config
	log          *slog.Logger
	bolt         *bolt.DB

	life lifecycle
	// closing is set by Close, once every call has ended, before its own
	// write: that transaction runs at the clock's last reading instead of
	// reading it again (see monotonicClock.last).
	closing bool

	// writeMu is held around every write transaction. bbolt serialises
	// writers anyway, so it costs no throughput; holding it ourselves means
	// that whatever a commit teaches the in-memory state (mark counts, the
	// Bloom filters, counters) is in place before the next writer looks. A
	// caller with a context can give up waiting for it (see writeLock).
	writeMu writeLock

	// current is the write transaction in progress, guarded by writeMu.
	current *writeTx
	// live are the live dedup windows and their filters.
	live *windowset.Set
	// dups caches final marks for the duplicate fast path (see cache.go).
	dups dupcache.Cache
	// clock is Options.Now, never going backwards.
	clock monotonicClock
	// clockSaved, guarded by writeMu, is the store's time last saved in the
	// file, Unix nanoseconds (see saveClockLocked).
	clockSaved int64
	// poisoned, guarded by writeMu, is set when a commit failed in a way
	// that leaves the file's state in doubt; every later write returns it.
	// See commitFailedLocked.
	poisoned error
	// crashHook, set only by the crash tests, is called at each crashPoint
	// of the write path; the test's child process kills itself there.
	crashHook func(crashPoint)
	// filterHook, set only by tests, may turn a filter's "no" into "maybe"
	// (never the reverse) to check that correctness never rests on it.
	filterHook func(maybe bool) bool

	// opened is what Open learnt about the persisted filters, for Close.
	opened openedFilters

	// orphansUpTo is the last claim token issued before this Open: a claim
	// with a token up to it was taken by a process that is gone (see
	// orphan.go). 0 with Options.KeepOrphanedClaims.
	orphansUpTo uint64

	// expireMu lets one Expire run at a time.
	expireMu sync.Mutex
	expirer  struct {
		stop context.CancelFunc
		done chan struct{}
	}

	group group
	stats statsCollector
	// maxResponse is the largest response (with a permanent error's
	// message) a mark may hold; see MaxResponseSize.
	maxResponse int
}

// Path returns the file the DB was opened on.
func (db *DB) Path() string { return db.path }

// Update runs fn in a writable transaction on the user buckets and commits
// it if fn returns nil; an error, a panic or a runtime.Goexit rolls
// everything back and releases the write lock (the panic or the Goexit
// goes on in the caller). Do not call other DB methods from fn.
func (db *DB) Update(fn func(tx *Tx) error) error {
	if !db.life.enter() {
		return ErrClosed
	}
	defer db.life.exit()
	var done *writeTx
	err := db.write(func(w *writeTx) error {
		done = w
		return callUser(func() error { return fn(w.tx) })
	})
	if err == nil {
		runHooks(done.hooks) // after the commit and the write lock
	}
	return err
}

// View runs fn in a read-only transaction, which sees a consistent snapshot.
// Readers never block each other, and a reader blocks a writer in one case
// only: a commit that grows the file past bbolt's memory map
// (Options.InitialMmapSize: 1 GiB by default on 64-bit platforms but
// Windows, then every further GiB) must remap it, and waits until every
// open View has returned; while it waits, new Views wait behind it. So
// keep Views short: a long one can stall the writer that crosses the
// map's end for as long as it stays open (and a long read also keeps
// bbolt from reusing the pages it sees, so the file grows).
//
// Do not call Apply, ApplyBatch, Claim, Update or any other write from
// fn. Within the map it works; once the file outgrows the map, that write
// waits for this View to end, which never happens: a deadlock that Go
// gives no way to detect (a writer cannot tell whether the reader it
// waits for is its own caller).
func (db *DB) View(fn func(tx *Tx) error) error {
	if !db.life.enter() {
		return ErrClosed
	}
	defer db.life.exit()
	return db.guard(func() error {
		return db.bolt.View(func(btx *bolt.Tx) error {
			tx := newTx(btx)
			tx.db = db
			defer tx.end()
			return callUser(func() error { return fn(tx) })
		})
	})
}

// Sync flushes the file to disk (bbolt's Sync: fdatasync). With
// Options.NoSync, commits skip it, and Sync is how a program makes what it
// has committed so far durable, at a point of its choosing (before it
// acknowledges a batch to a broker, say). Without NoSync every commit is
// durable already and Sync costs one more flush for nothing.
//
// Errors: ErrClosed after Close, and the file system's error.
func (db *DB) Sync() error {
	if !db.life.enter() {
		return ErrClosed
	}
	defer db.life.exit()
	if db.opts.ReadOnly {
		return nil // nothing of this process's to flush
	}
	return db.bolt.Sync()
}

// Done returns a channel that is closed when Close begins. Code built on
// the store that waits between calls (a queue receiver waiting for a
// message, a relay waiting for its next attempt) selects on it next to its
// context, so that closing the store ends the wait instead of leaving it
// blocked on a store that will never wake it. Calls made after it is
// closed return ErrClosed.
func (db *DB) Done() <-chan struct{} { return db.life.closing }

// isOpen reports whether Close has not begun.
func (db *DB) isOpen() bool {
	if !db.life.enter() {
		return false
	}
	db.life.exit()
	return true
}

// lifecycle counts the calls in flight so Close can wait for them, and
// refuses new ones once Close has begun.
type lifecycle struct {
	mu     sync.Mutex
	idle   sync.Cond
	closed bool
	active int
	// done is closed when the Close that began closing has closed the
	// file; a concurrent Close waits for it.
	done chan struct{}
	// closing is closed when Close begins (see DB.Done).
	closing chan struct{}
}

func (l *lifecycle) init() {
	l.idle.L = &l.mu
	l.done = make(chan struct{})
	l.closing = make(chan struct{})
}

func (l *lifecycle) enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.active++
	return true
}

func (l *lifecycle) exit() {
	l.mu.Lock()
	l.active--
	if l.active == 0 && l.closed {
		l.idle.Broadcast()
	}
	l.mu.Unlock()
}

// close refuses new calls and waits for those in flight. It reports false
// when another Close began first.
func (l *lifecycle) close() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.closed = true
	close(l.closing)
	for l.active > 0 {
		l.idle.Wait()
	}
	return true
}
