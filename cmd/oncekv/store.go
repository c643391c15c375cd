package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/oncekv/oncekv"
)

// storeFlags are the flags of every command that opens a store.
type storeFlags struct {
	now       string
	retention time.Duration
	json      bool
	// create lets a writable open create a missing file (load); every
	// other command refuses a path that is not there, rather than leave an
	// empty store behind a typo.
	create bool
	// byRetention: the command goes by -retention (expire, load), so it
	// must be a real window, never fitted to the file as other commands'
	// Retention is.
	byRetention bool
	// read: a read command, which also takes an admin handler's URL for
	// PATH (see remote.go), with the headers of -header.
	read    bool
	headers headerFlag
}

// register adds the store flags to fs: a read command also gets -json,
// and one that goes by the dedup window (expire, load) -retention.
func (s *storeFlags) register(fs *flag.FlagSet, read, retention bool) {
	fs.StringVar(&s.now, "now", "", "the time to judge leases, ages and expiry by, RFC 3339 (default: the system clock)")
	s.byRetention = retention
	if retention {
		fs.DurationVar(&s.retention, "retention", oncekv.DefaultRetention,
			"the dedup window the program uses on this store: it is not kept in the file, and expiry goes by it")
	}
	if read {
		fs.BoolVar(&s.json, "json", false, "print JSON for scripts instead of text")
		s.registerRemote(fs)
	}
}

// registerRemote lets a command that only reads take an admin handler's
// URL for PATH, with -header.
func (s *storeFlags) registerRemote(fs *flag.FlagSet) {
	s.read = true
	fs.Var(&s.headers, "header", "with an admin handler's URL for PATH: a request header, \"Name: value\" (repeatable;\n"+
		"$"+authEnv+" sets Authorization without putting it on the command line)")
}

// open opens the store at path. It runs no background expiry, and keeps
// orphaned claims as they are (Options.KeepOrphanedClaims), so that a
// command changes only what it was asked to and shows leases as written.
func (s *storeFlags) open(path string, readOnly bool) (*oncekv.DB, error) {
	if isURL(path) {
		if !readOnly || !s.read {
			return nil, &usageError{fmt.Sprintf("%s: an admin handler's URL serves the read commands; "+
				"this one writes: run it on the file, with the program stopped", path)}
		}
		local, err := s.fetch(path)
		if err != nil {
			return nil, err
		}
		path = local
	}
	opts := &oncekv.Options{
		ReadOnly:           readOnly,
		Retention:          s.retention,
		ExpireInterval:     -1,
		KeepOrphanedClaims: true,
		OpenTimeout:        time.Second,
	}
	if s.byRetention && s.retention == 0 {
		return nil, &usageError{"-retention 0: give the dedup window the program uses on this store"}
	}
	if s.now != "" {
		t, err := time.Parse(time.RFC3339Nano, s.now)
		if err != nil {
			return nil, &usageError{fmt.Sprintf("-now %q: %v", s.now, err)}
		}
		opts.Now = func() time.Time { return t }
	}
	if !exists(path) && (readOnly || !s.create) {
		return nil, fmt.Errorf("oncekv: %s: no such file", path)
	}
	if fi, err := os.Stat(path); readOnly && err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
		// bbolt would set up an empty file as a new one, and fail doing so
		// on a read-only handle ("bad file descriptor"); an empty file is
		// no store, or one cut short, which check must report as found.
		return nil, fmt.Errorf("%w: %s is empty (0 bytes)", oncekv.ErrNotOncekv, path)
	}
	for {
		db, err := oncekv.Open(path, opts)
		switch {
		case errors.Is(err, oncekv.ErrLocked):
			return nil, lockedError(path, err)
		case !errors.Is(err, oncekv.ErrInvalidOptions):
			return db, err
		case s.retention != 0:
			return nil, fmt.Errorf("%w (give the program's -retention)", err)
		case opts.Retention == 0:
			opts.Retention = oncekv.DefaultRetention
		case opts.Retention < time.Second:
			return nil, err
		}
		// A command that does not go by the dedup window needs no
		// particular Retention, but Open checks it against the file's
		// WindowSpan (at most MaxWindows windows): halving the default
		// fits it to a store of short windows in a few tries.
		opts.Retention /= 2
	}
}

// lockedError is ErrLocked as an operator needs it: a running process
// holds the file, and the two ways to read it anyway.
func lockedError(path string, err error) error {
	return fmt.Errorf("%w\n"+
		"%s is held open by a running process (bbolt's file lock): that process owns it while it runs. Two ways out:\n"+
		"  - give the URL of that process's admin handler (package admin) instead of the path, e.g.\n"+
		"    oncekv stats http://127.0.0.1:8080/debug/oncekv (the read commands fetch a consistent copy from it);\n"+
		"  - or run the command on a backup: the admin handler's /backup, or DB.BackupFile called by the program.\n"+
		"Commands that write (redrive, release, forget, expire, load) need the program stopped", err, path)
}

// closeInto closes db, keeping the first error in *err.
func closeInto(db *oncekv.DB, err *error) {
	if cerr := db.Close(); *err == nil {
		*err = cerr
	}
}

// writeJSON writes v as one line of JSON.
func writeJSON(out io.Writer, v any) error {
	return json.NewEncoder(out).Encode(v)
}

// stamp formats a time for text output; the zero time is "-".
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}
