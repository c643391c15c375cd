package oncekv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/oncekv/oncekv/internal/layout"
)

// Open opens the oncekv database at path, creating it if needed; opts may
// be nil for defaults. Errors: ErrInvalidOptions, listing every bad field;
// and, naming the path, ErrLocked after Options.OpenTimeout, ErrNotOncekv,
// ErrCorrupt, and ErrReadOnly for a read-only open of a file never opened
// writable.
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

	// A damaged file can make bbolt panic, or fault reading past the end
	// of its memory map (SIGBUS): both become ErrCorrupt
	// (docs/design/damaged-files.md).
	defer recoverCorrupt(path, &err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))

	began := time.Now()
	b, err := bolt.Open(path, o.FileMode, &bolt.Options{
		Timeout:  o.OpenTimeout,
		NoSync:   o.NoSync,
		ReadOnly: o.ReadOnly, // a shared lock: other readers may open it too
		// bbolt reads the freelist of a read-only file only when asked, and
		// Stats.File would report no free pages without it.
		PreLoadFreelist: o.ReadOnly,
		// The array freelist reuses the lowest free pages first, so the file
		// plateaus under steady traffic (bench/README.md, "plateau").
		FreelistType: bolt.FreelistArrayType,
		// Negative means "only what the file needs": bbolt's own <= 0.
		InitialMmapSize: o.InitialMmapSize,
	})
	if err != nil {
		return nil, openError(path, o.OpenTimeout, time.Since(began), err)
	}
	if creating {
		// A new file's directory entry is durable once its directory is synced.
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
	db = &DB{path: path, opts: o, windowConfig: o.window(), log: o.Logger, bolt: b,
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
		return errors.Join(db.loadWindows(tx), db.loadTombs(tx), db.loadOrphanLine(tx), db.loadParked(tx), db.loadGhosts(tx), db.loadAdvisor(tx))
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
	if n := db.live.Newest(); n != nil {
		db.clock.atLeast(n.Start) // a restart must not turn the clock back either
	}
	if o.MaxClockJump > 0 {
		db.clock.anchor()
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

// fileSpan returns the span the file's windows are made with; asked is
// Options.WindowSpan, zero for the file's. Every window end is computed from
// the span, so another one than the file's is refused. A legacy file without
// a stored span is taken to have asked's (or 1h), refused when its windows
// are not aligned to it, and recorded; an older format is upgraded by the
// first writable open (layout.Upgrade).
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
		// A file of an older format: new records (format 3's marks,
		// format 4's parked keys and tombstones) would be misread or
		// ignored by the build that wrote it, so the file says so first.
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

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
