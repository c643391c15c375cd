package oncekv

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// Backup writes a copy of the whole store (user buckets, marks, fences,
// everything) to w, as one consistent snapshot: a read transaction, so
// writers carry on meanwhile and the copy holds each of their commits
// whole or not at all. It returns the number of bytes written. The copy is
// an oncekv file: Open it to restore. Claims in progress in the copy belong
// to no process when it is opened, and are released then (see
// Options.KeepOrphanedClaims).
//
// The read transaction lasts as long as w takes; like any long read it
// keeps bbolt from reusing the pages writers free meanwhile, so the live
// file may grow during a slow backup.
//
// Errors: w's error; ErrClosed after Close.
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
		// bbolt flattens the writer's error into a string; give the caller
		// the error itself, for errors.Is.
		err = fmt.Errorf("oncekv: backup: %w", uw.err)
	}
	return n, err
}

// BackupFile writes a Backup to path, safely: into a temporary file in the
// same directory, fsynced, then renamed over path, and the directory
// synced. A crash midway leaves path as it was (and perhaps a stray
// temporary file), never a partial copy under path's name.
//
// A path that is the store's own file is refused with an error matching
// fs.ErrExist: the rename would put the copy in place of the live file
// under the running store.
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

// userWriter is the caller's writer, called from inside bbolt: a panic in
// it is the caller's, and guard raises it again rather than take it for a
// damaged file.
// It keeps the first error w returned.
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
