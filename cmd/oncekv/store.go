package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
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
}

// register adds the store flags to fs; a read command also gets -json.
func (s *storeFlags) register(fs *flag.FlagSet, read bool) {
	fs.StringVar(&s.now, "now", "", "the time to judge leases, ages and expiry by, RFC 3339 (default: the system clock)")
	fs.DurationVar(&s.retention, "retention", oncekv.DefaultRetention,
		"the dedup window the program uses on this store: it is not kept in the file, and expiry goes by it")
	if read {
		fs.BoolVar(&s.json, "json", false, "print JSON for scripts instead of text")
	}
}

// open opens the store at path. It runs no background expiry, and keeps
// orphaned claims as they are (Options.KeepOrphanedClaims), so that a
// command changes only what it was asked to and shows leases as written.
func (s *storeFlags) open(path string, readOnly bool) (*oncekv.DB, error) {
	opts := &oncekv.Options{
		ReadOnly:           readOnly,
		Retention:          s.retention,
		ExpireInterval:     -1,
		KeepOrphanedClaims: true,
		OpenTimeout:        time.Second,
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
	return oncekv.Open(path, opts)
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
