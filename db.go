package oncekv

import (
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

	"github.com/oncekv/oncekv/bucket"
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

	// writeMu is held around every write transaction. bbolt serialises
	// writers anyway, so it costs no throughput; holding it ourselves means
	// that whatever a commit teaches the in-memory state (counters now, the
	// Bloom filters later) is in place before the next writer looks.
	writeMu sync.Mutex

	// current is the write transaction in progress, guarded by writeMu.
	current *writeTx
	// windows are the live dedup windows and their filters.
	windows *window.Set
	// clock is Options.Now, never going backwards.
	clock monotonicClock
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

	// expireMu lets one Expire run at a time.
	expireMu sync.Mutex
	expirer  struct {
		stop context.CancelFunc
		done chan struct{}
	}

	group group
	stats statsCollector
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
	_, statErr := os.Stat(path)
	creating := errors.Is(statErr, fs.ErrNotExist)

	// bbolt reads the file's pages directly; on a damaged file it can panic
	// where it expected structure. Users get an error instead.
	defer recoverCorrupt(path, &err)
	// A file cut short, or a page number past its end, makes bbolt read its
	// memory map beyond the file; the kernel answers with SIGBUS or SIGSEGV,
	// which kills the process unless the faulting goroutine asked for a
	// panic instead. With it, recoverCorrupt reports ErrCorrupt.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))

	b, err := bolt.Open(path, o.FileMode, &bolt.Options{
		Timeout: o.OpenTimeout,
		NoSync:  o.NoSync,
		// The array freelist hands out the lowest free pages first, so
		// pages that expiry frees are reused before the file's end: under
		// steady traffic the file plateaus at its first retention's size.
		// The map freelist left freed pages scattered (1.27x the size, still
		// growing after ten retentions); see bench/README.md, "plateau".
		FreelistType: bolt.FreelistArrayType,
	})
	if err != nil {
		return nil, openError(path, o.OpenTimeout, err)
	}
	if creating {
		// A new file's directory entry is durable only once its directory is
		// synced; without it a power loss can lose the whole file.
		if err := syncDir(filepath.Dir(path)); err != nil && !o.NoSync {
			_ = b.Close()
			return nil, fmt.Errorf("oncekv: open %q: sync directory: %w", path, err)
		}
	}
	if err := initFile(b, o.Now().UnixNano()); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("oncekv: open %q: %w", path, err)
	}
	db = &DB{path: path, opts: o, window: o.window(), log: o.Logger, bolt: b}
	db.clock.now = o.Now
	if err := b.View(db.loadWindows); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("oncekv: open %q: %w", path, err)
	}
	db.noteHighWater()
	if n := db.windows.Newest(); n != nil {
		db.clock.atLeast(n.Start) // a restart must not turn the clock back either
	}
	db.life.init()
	if o.ExpireInterval > 0 {
		ctx, stop := context.WithCancel(context.Background())
		db.expirer.stop, db.expirer.done = stop, make(chan struct{})
		go db.expireInBackground(ctx)
	}
	return db, nil
}

// initFile checks the file in a read transaction, and only when it is new
// creates the system buckets in a write transaction, so reopening an
// existing store costs no fsync.
func initFile(b *bolt.DB, now int64) error {
	var fresh bool
	if err := b.View(func(tx *bolt.Tx) (err error) {
		fresh, err = bucket.Init(tx, now)
		return err
	}); err != nil || !fresh {
		return err
	}
	return b.Update(func(tx *bolt.Tx) error {
		_, err := bucket.Init(tx, now)
		return err
	})
}

func openError(path string, timeout time.Duration, err error) error {
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return fmt.Errorf("oncekv: open %q: gave up after %v: %w", path, timeout, ErrLocked)
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
// Every later call returns ErrClosed. Closing twice is not an error.
func (db *DB) Close() error {
	if db.expirer.stop != nil {
		db.expirer.stop()
		<-db.expirer.done
	}
	if !db.life.close() {
		return nil
	}
	// Keep the clock's high-water mark for the next Open (see clock.go). A
	// store that cannot write any more (poisoned, full disk) still closes.
	err := db.write(func(w *writeTx) error {
		return bucket.WriteExpiry(w.btx, bucket.Expiry{Floor: db.windows.Floor(), ClockHigh: w.now.UnixNano()})
	})
	if err != nil {
		db.log.Warn("closing without saving the clock's high-water mark", "path", db.path, "err", err)
	}
	return db.bolt.Close()
}

// Update runs fn in a writable transaction on the user buckets and commits
// it if fn returns nil; an error or a panic rolls everything back. Do not
// call other DB methods from fn.
func (db *DB) Update(fn func(tx *Tx) error) error {
	if !db.life.enter() {
		return ErrClosed
	}
	defer db.life.exit()
	return db.write(func(w *writeTx) error {
		return callUser(func() error { return fn(w.tx) })
	})
}

// View runs fn in a read-only transaction, which sees a consistent snapshot
// and never blocks writers or other readers.
func (db *DB) View(fn func(tx *Tx) error) error {
	if !db.life.enter() {
		return ErrClosed
	}
	defer db.life.exit()
	return db.guard(func() error {
		return db.bolt.View(func(btx *bolt.Tx) error {
			tx := newTx(btx)
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
}

func (l *lifecycle) init() { l.idle.L = &l.mu }

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

// close reports false when the DB was already closed.
func (l *lifecycle) close() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.closed = true
	for l.active > 0 {
		l.idle.Wait()
	}
	return true
}
