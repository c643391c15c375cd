package oncekv

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// Backup writes a consistent copy of the whole store to w, from one read
// transaction (writers carry on), and returns the bytes written. The copy
// is an oncekv file: Open it to restore; its claims in progress are then
// orphans (Options.KeepOrphanedClaims). A slow w keeps bbolt from reusing
// freed pages meanwhile, so the live file may grow. Errors: w's, ErrClosed.
func (db *DB) Backup(w io.Writer) (int64, error) {
	if !db.life.enter() {
		return 0, ErrClosed
	}
	defer db.life.exit()
	var n int64
	uw := &userWriter{w: w}
	err := db.guard(func() error {
		return db.bolt.View(func(btx *bolt.Tx) (err error) {
			n, err = btx.WriteTo(uw)
			return err
		})
	})
	if uw.err != nil {
		// bbolt flattens w's error into a string: return it for errors.Is.
		err = fmt.Errorf("oncekv: backup: %w", uw.err)
	}
	return n, err
}

// BackupFile writes a Backup to a temporary file beside path, fsyncs it,
// renames it over path and syncs the directory: a crash leaves path as it
// was, never a partial copy. The store's own file is refused with an error
// matching fs.ErrExist.
func (db *DB) BackupFile(path string) (n int64, err error) {
	if target, serr := os.Stat(path); serr == nil {
		if self, serr := os.Stat(db.path); serr == nil && os.SameFile(target, self) {
			return 0, fmt.Errorf("oncekv: backup to %q: it is the store's own file: %w", path, fs.ErrExist)
		}
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return 0, fmt.Errorf("oncekv: backup to %q: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
			err = fmt.Errorf("oncekv: backup to %q: %w", path, trimmed(err))
		}
	}()
	if n, err = db.Backup(f); err != nil {
		return 0, err
	}
	if err = f.Chmod(db.opts.FileMode); err != nil {
		return 0, err
	}
	if err = f.Sync(); err != nil {
		return 0, err
	}
	if err = f.Close(); err != nil {
		return 0, err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return 0, err
	}
	return n, syncDir(dir)
}

// userWriter is the caller's writer, called inside bbolt: guard raises its
// panic again. It keeps w's first error.
type userWriter struct {
	w   io.Writer
	err error
}

func (u *userWriter) Write(p []byte) (n int, err error) {
	err = callUser(func() (err error) {
		n, err = u.w.Write(p)
		return err
	})
	if err != nil && u.err == nil {
		u.err = err
	}
	return n, err
}
