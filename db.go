package oncekv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/oncekv/oncekv/internal/dupcache"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/windows"
	"github.com/oncekv/oncekv/window"
)

// DB is an open oncekv store: one bbolt file holding user buckets, dedup
// marks and fences. A DB is safe for concurrent use by many goroutines. Only
// one DB may have a file open at a time, across all processes.
type DB struct {
	path   string
	opts   Options
	window window.Config
	log    *slog.Logger
	bolt   *bolt.DB

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
	// windows are the live dedup windows and their filters.
	windows *windows.Set
	// dups caches final marks for the duplicate fast path (see dups.go).
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

// Open opens the oncekv database at path, creating it if it does not exist.
// opts may be nil for defaults.
//
// Open fails with ErrLocked, naming the path, when another process holds the
// file for longer than Options.OpenTimeout; with ErrNotOncekv when the file
// is not an oncekv database; and with ErrCorrupt when it is damaged.
func Open(path string, opts *Options) (db *DB, err error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if path == "" {
		return nil, fmt.Errorf("%w: empty path", ErrInvalidOptions)
	}
	info, statErr := os.Stat(path)
	creating := errors.Is(statErr, fs.ErrNotExist)
	if o.ReadOnly && statErr == nil && info.Mode().IsRegular() && info.Size() == 0 {
		// bbolt would try to write a new file's first pages through a
		// read-only descriptor and report "bad file descriptor".
		return nil, fmt.Errorf("oncekv: open %q: %w: the file is empty; open it writable once", path, ErrReadOnly)
	}
	asked := o.WindowSpan // zero: the file's
	if creating && asked == 0 {
		// Checked before the file exists, so bad options create nothing.
		o.WindowSpan = DefaultWindowSpan
		if err := o.validateWindows(); err != nil {
			return nil, err
		}
	}

	// bbolt reads the file's pages directly; on a damaged file it can panic
	// where it expected structure. Users get an error instead.
	defer recoverCorrupt(path, &err)
	// A file cut short, or a page number past its end, makes bbolt read its
	// memory map beyond the file; the kernel answers with SIGBUS or SIGSEGV,
	// which kills the process unless the faulting goroutine asked for a
	// panic instead. With it, recoverCorrupt reports ErrCorrupt.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))

	began := time.Now()
	b, err := bolt.Open(path, o.FileMode, &bolt.Options{
		Timeout:  o.OpenTimeout,
		NoSync:   o.NoSync,
		ReadOnly: o.ReadOnly, // a shared lock: other readers may open it too
		// bbolt reads the freelist of a read-only file only when asked, and
		// Stats.File would report no free pages without it.
		PreLoadFreelist: o.ReadOnly,
		// The array freelist hands out the lowest free pages first, so
		// pages that expiry frees are reused before the file's end: under
		// steady traffic the file plateaus at its first retention's size.
		// The map freelist left freed pages scattered (1.27x the size, still
		// growing after ten retentions); see bench/README.md, "plateau".
		FreelistType: bolt.FreelistArrayType,
		// Negative means "only what the file needs": bbolt's own <= 0.
		InitialMmapSize: o.InitialMmapSize,
	})
	if err != nil {
		return nil, openError(path, o.OpenTimeout, time.Since(began), err)
	}
	if creating {
		// A new file's directory entry is durable only once its directory is
		// synced; without it a power loss can lose the whole file.
		if err := syncDir(filepath.Dir(path)); err != nil && !o.NoSync {
			_ = b.Close()
			return nil, fmt.Errorf("oncekv: open %q: sync directory: %w", path, err)
		}
	}
	span := cmp.Or(asked, DefaultWindowSpan)
	if err := initFile(b, o.Now().UnixNano(), int64(span), o.ReadOnly); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("oncekv: open %q: %w", path, err)
	}
	if o.WindowSpan, err = fileSpan(b, asked, o.ReadOnly); err == nil {
		err = o.validateWindows()
	}
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("oncekv: open %q: %w", path, err)
	}
	db = &DB{path: path, opts: o, window: o.window(), log: o.Logger, bolt: b,
		writeMu: newWriteLock(), maxResponse: MaxResponseSize}
	db.stats.maxHandlers = max(o.MaxHandlerStats, 0)
	db.group.init(groupEnv{
		lock:   db.writeMu.LockContext,
		unlock: db.writeMu.Unlock,
		commit: func(batch []*op) { _ = db.commitOpsLocked(batch) },
	}, o.MaxGroupSize)
	db.clock.now, db.clock.maxJump = o.Now, int64(o.MaxClockJump)
	db.clock.warn = func(reading, high time.Time) {
		db.log.Warn("clock jumped forward; keeping the store's time until the jump is confirmed",
			"reading", reading.UTC(), "store_time", high.UTC(), "max_clock_jump", o.MaxClockJump)
	}
	if err := b.View(func(tx *bolt.Tx) error {
		return errors.Join(db.loadWindows(tx), db.loadOrphanLine(tx))
	}); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("oncekv: open %q: %w", path, err)
	}
	if db.opened.staleStamp && !o.ReadOnly {
		// Only after a crash (or a compaction): the rebuild costs more.
		if err := b.Update(layout.DropNewestFilter); err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("oncekv: open %q: %w", path, err)
		}
	}
	db.noteHighWater()
	if n := db.windows.Newest(); n != nil {
		db.clock.atLeast(n.Start) // a restart must not turn the clock back either
	}
	db.life.init()
	if o.ExpireInterval > 0 && !o.ReadOnly {
		ctx, stop := context.WithCancel(context.Background())
		db.expirer.stop, db.expirer.done = stop, make(chan struct{})
		go db.expireInBackground(ctx)
	}
	return db, nil
}

// initFile checks the file in a read transaction, and only when it is new
// creates the system buckets in a write transaction, so reopening an
// existing store costs no fsync. A new file records span as its windows'.
func initFile(b *bolt.DB, now, span int64, readOnly bool) error {
	var fresh bool
	if err := b.View(func(tx *bolt.Tx) (err error) {
		fresh, err = layout.Init(tx, now, span)
		return err
	}); err != nil || !fresh {
		return err
	}
	if readOnly {
		return fmt.Errorf("%w: the file has no oncekv data yet; open it writable once", ErrReadOnly)
	}
	return b.Update(func(tx *bolt.Tx) error {
		_, err := layout.Init(tx, now, span)
		return err
	})
}

// fileSpan returns the span the file's windows are made with. asked is
// Options.WindowSpan, zero for "the file's". Every window end is computed
// from the span, so opening with another one would end windows early, or
// make them overlap, and drop marks before their retention: it is refused.
//
// A legacy file, written before the span was stored, was made with whatever
// span its opens used; it is taken to be asked (or the old default, 1h),
// which is what every open of it must have used for its marks to have
// been kept right. A span its windows are not aligned to cannot be the
// one, and is refused; otherwise it is recorded, once. Any file of an
// older format is moved to the current one by its first writable open
// (see layout.Upgrade); a read-only open reads it as it is.
func fileSpan(b *bolt.DB, asked time.Duration, readOnly bool) (time.Duration, error) {
	var stored int64
	var legacy, outdated bool
	var misaligned int64
	want := int64(cmp.Or(asked, DefaultWindowSpan))
	err := b.View(func(tx *bolt.Tx) (err error) {
		if stored, legacy, err = layout.ReadSpan(tx); err != nil {
			return err
		}
		if outdated, err = layout.Outdated(tx); err != nil || !legacy {
			return err
		}
		return layout.ForEachWindow(tx, false, func(start int64, _ *bolt.Bucket) error {
			if start%want != 0 {
				misaligned = start
			}
			return nil
		})
	})
	switch {
	case err != nil:
		return 0, err
	case legacy && misaligned != 0:
		return 0, fmt.Errorf("%w: WindowSpan = %v: this file's window starting at %v was not made with it; "+
			"open with the WindowSpan the file was written with", ErrInvalidOptions, time.Duration(want),
			time.Unix(0, misaligned).UTC().Format(time.RFC3339))
	case legacy && readOnly:
		return time.Duration(want), nil // recorded by the next writable open
	case legacy:
		return time.Duration(want), b.Update(func(tx *bolt.Tx) error { return layout.Upgrade(tx, want) })
	case asked != 0 && int64(asked) != stored:
		return 0, fmt.Errorf("%w: WindowSpan = %v: this file's windows are %v; open with WindowSpan %v, or 0 to use the file's",
			ErrInvalidOptions, asked, time.Duration(stored), time.Duration(stored))
	case outdated && !readOnly:
		// A version 2 file: new marks are written in format 3, which a
		// version 2 build would misread, so the file says so first.
		return time.Duration(stored), b.Update(func(tx *bolt.Tx) error { return layout.Upgrade(tx, stored) })
	}
	return time.Duration(stored), nil
}

func openError(path string, timeout, waited time.Duration, err error) error {
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		// bbolt polls the lock and stops one poll short of the timeout, so
		// the time really waited is what the message says.
		return fmt.Errorf("oncekv: open %q: gave up after %v (OpenTimeout %v): %w",
			path, waited.Round(time.Millisecond), timeout, ErrLocked)
	case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrVersionMismatch):
		return fmt.Errorf("oncekv: open %q: %w (%v)", path, ErrNotOncekv, err)
	case errors.Is(err, bolterrors.ErrChecksum),
		// bbolt's error for a file shorter than its two meta pages has no
		// sentinel; it is a store cut short (or a foreign file).
		strings.HasPrefix(err.Error(), "file size too small"):
		return fmt.Errorf("oncekv: open %q: %w (%v)", path, ErrCorrupt, err)
	}
	return fmt.Errorf("oncekv: open %q: %w", path, err)
}

// recoverCorrupt turns a panic inside bbolt while reading a damaged file
// into ErrCorrupt.
func recoverCorrupt(path string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("oncekv: %q: %w (bbolt: %v)", path, ErrCorrupt, r)
	}
}

// guard runs fn, a bbolt transaction, and turns a panic that bbolt raises
// on a damaged page (an assertion such as "page expected to be", an index
// out of range, or a fault reading past the end of the memory map) into
// ErrCorrupt, so that a damaged file gives its readers an error and not a
// crash. A panic of the caller's own code inside the transaction is marked
// by callUser and raised again unchanged. bbolt rolls the transaction back
// on the way out, so nothing stays locked.
func (db *DB) guard(fn func() error) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if up, ok := r.(userPanic); ok {
			panic(up.val)
		}
		err = fmt.Errorf("oncekv: %q: %w (bbolt: %v)", db.path, ErrCorrupt, r)
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return fn()
}

// userPanic carries a panic of the caller's code through guard.
type userPanic struct{ val any }

// callUser runs fn, the caller's code, so that guard re-raises its panic
// instead of taking it for bbolt's. A bbolt panic inside fn (the caller
// reading a damaged page of a user bucket) stays a panic too: it happened
// in the caller's code, which may hold locks of its own.
func callUser(fn func() error) error {
	defer func() {
		if r := recover(); r != nil {
			panic(userPanic{r})
		}
	}()
	return fn()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Path returns the file the DB was opened on.
func (db *DB) Path() string { return db.path }

// Close waits for the calls in flight to finish, then closes the file.
// Before it does, it stores what the next Open would otherwise rebuild by
// reading every key of the newest window, that window's Bloom filter (a
// store opened and closed untouched is left as it was). Every later call
// returns ErrClosed. Closing twice is not an error: a
// Close that finds another one under way waits for it, so that the file is
// closed (and may be opened again) whichever Close returns first.
func (db *DB) Close() error {
	if db.expirer.stop != nil {
		db.expirer.stop()
		<-db.expirer.done
	}
	if !db.life.close() {
		<-db.life.done
		return nil
	}
	defer close(db.life.done)
	// Keep the clock's high-water mark and the newest window's filter for
	// the next Open (see clock.go and loadNewestFilter), only when there is
	// something new to keep (see closeNeedsSave). A store that cannot write
	// any more (poisoned, full disk) still closes: without the filters, the
	// next Open rebuilds them; the clock is tried again on its own, being
	// a few bytes where a filter may be megabytes.
	if save, ok := db.closeNeedsSave(); ok {
		// Close saves the latest reading the store took, and takes no
		// new one: what the next Open resumes from is what this store
		// acted on, whether or not Close had filters to write too.
		db.closing = true
		err := db.write(func(w *writeTx) error { return save.writeLocked(db, w) })
		if err != nil && save.clock && (save.newest != nil || len(save.sealed) > 0) {
			db.log.Warn("closing without saving the Bloom filters", "path", db.path, "err", err)
			save = closeSave{clock: true}
			err = db.write(func(w *writeTx) error { return save.writeLocked(db, w) })
		}
		if err != nil {
			db.log.Warn("closing without saving what the next Open needs", "path", db.path,
				"clock", save.clock, "filters", save.newest != nil || len(save.sealed) > 0, "err", err)
		}
	}
	return db.bolt.Close()
}

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
