package oncekv

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

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
	// closing, set by Close once every call has ended, makes its write use
	// the clock's last reading (see monotonicClock.last).
	closing bool

	// writeMu is held around every write transaction, so that what a commit
	// teaches the in-memory state is in place before the next writer looks
	// (docs/design/group-commit.md).
	writeMu writeLock

	// current is the write transaction in progress, guarded by writeMu.
	current *writeTx
	// live are the live dedup windows and their filters.
	live *windowset.Set
	// tombs are the tombstone windows and their filters (tombstones.go).
	tombs *windowset.Set
	// ghosts are the filters of expired keys (ghosts.go).
	ghosts ghostSet
	// advisor is the window advisor's report the file held at Open.
	advisor advisorState
	// dups caches final marks for the duplicate fast path (see cache.go).
	dups dupcache.Cache
	// snaps are the read snapshots duplicate look-ups share (snapshot.go).
	snaps snapshots
	// clock is Options.Now, never going backwards.
	clock monotonicClock
	// clockSaved, guarded by writeMu, is the store's time last saved in the
	// file, Unix nanoseconds.
	clockSaved int64
	// poisoned, guarded by writeMu, is returned by every write once a commit
	// failed with the file's state in doubt (see commitFailedLocked).
	poisoned error
	// crashHook, set by the crash tests only, is called at each crashPoint.
	crashHook func(crashPoint)
	// filterHook, set by tests only, may turn a filter's "no" into "maybe".
	filterHook func(maybe bool) bool

	// opened is what Open learnt about the persisted filters, for Close.
	opened openedFilters

	// orphansUpTo is the last claim token issued before this Open (see
	// orphan.go); 0 with Options.KeepOrphanedClaims.
	orphansUpTo uint64
	// parkedKeys is Stats.ParkedKeys: the parked keys' index's count at
	// Open, moved after each commit that parks or resolves one.
	parkedKeys atomic.Int64

	// expireMu lets one Expire run at a time.
	expireMu sync.Mutex
	expirer  struct {
		stop context.CancelFunc
		done chan struct{}
	}

	group group
	stats statsCollector
	// maxResponse is MaxResponseSize, lowered by tests.
	maxResponse int
}

// Path returns the file the DB was opened on.
func (db *DB) Path() string { return db.path }

// Update runs fn in a writable transaction on the user buckets and commits
// it if fn returns nil. An error, a panic or a runtime.Goexit of fn rolls
// back and releases the write lock; the panic or Goexit goes on in the
// caller. fn must not call other DB methods.
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

// View runs fn in a read-only transaction on a consistent snapshot. Readers
// never block each other; a commit that grows the file past bbolt's memory
// map (Options.InitialMmapSize) waits for every open View, so keep Views
// short, and never write through the DB from fn: once the file outgrows the
// map, that deadlocks (docs/design/mmap-and-readers.md).
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

// Sync flushes the file to disk (fdatasync): with Options.NoSync, how a
// program makes its commits so far durable when it chooses. Without NoSync
// every commit is durable already. Errors: ErrClosed, the file system's.
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

// Done returns a channel closed when Close begins, for code built on the
// store that waits between calls (a queue receiver, a relay) to select on
// next to its context. Calls after that return ErrClosed.
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
	// done is closed once the first Close has closed the file.
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
