package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/oncekv/oncekv"
)

// openResult is the open cell: how long Open takes with many live marks
// after a clean Close (issue 11: under a second at 10M), and what it took
// to get there.
type openResult struct {
	marks, windows int
	load           time.Duration // DB.LoadMarks of every mark, sync off
	close          time.Duration // the clean Close after the load
	fileBytes      int64
	opens          []time.Duration // each after a clean Close
}

func (o *openResult) median() time.Duration {
	v := slices.Clone(o.opens)
	slices.Sort(v)
	return v[len(v)/2]
}

// openRuns is how many times the open cell opens the loaded file.
const openRuns = 3

// openCell loads cfg.openMarks DONE marks with DB.LoadMarks (no effect
// record: Open reads marks, not user data) spread over cfg.openWindows
// windows, closes the store, and times openRuns Opens, each followed by a
// clean Close. Each Open must find every mark live.
func (b *bench) openCell() (*openResult, error) {
	dir, err := os.MkdirTemp(b.cfg.tmp, "oncekv-bench-open-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	o := &openResult{marks: b.cfg.openMarks, windows: b.cfg.openWindows}
	clock := newSpreadClock(b.cfg.span, o.windows, o.marks)
	sc := b.storeConfig(dir, false)
	sc.now = clock.now
	db, err := openOncekvDB(sc)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	for lo := 0; lo < o.marks; {
		w := clock.window(lo)
		hi := lo + 1
		for hi < min(o.marks, lo+50_000) && clock.window(hi) == w {
			hi++
		}
		clock.at.Store(int64(w))
		marks := make([]oncekv.MarkInfo, 0, hi-lo)
		for _, r := range requests(fmt.Sprintf("open%d", lo), hi-lo, b.cfg) {
			marks = append(marks, oncekv.MarkInfo{Handler: r.handler, Key: r.key, State: oncekv.MarkDone,
				FirstSeen: clock.now(), Fingerprint: sha256.Sum256(r.payload), Response: r.response})
		}
		n, err := db.LoadMarks(marks)
		if err == nil && n != len(marks) {
			err = fmt.Errorf("open cell: LoadMarks loaded %d of %d marks", n, len(marks))
		}
		if err != nil {
			_ = db.Close()
			return nil, err
		}
		if hi/1_000_000 > lo/1_000_000 {
			progress("oncekv open cell: %d of %d marks loaded in %v", hi, o.marks, time.Since(t0).Round(time.Second))
		}
		lo = hi
	}
	o.load = time.Since(t0)
	t0 = time.Now()
	if err := db.Close(); err != nil {
		return nil, err
	}
	o.close = time.Since(t0)
	if fi, err := os.Stat(filepath.Join(dir, "oncekv.db")); err == nil {
		o.fileBytes = fi.Size()
	}
	for range openRuns {
		t0 := time.Now()
		db, err := openOncekvDB(sc)
		if err != nil {
			return nil, err
		}
		o.opens = append(o.opens, time.Since(t0))
		live := db.Stats().LiveMarks
		if err := db.Close(); err != nil {
			return nil, err
		}
		if live != uint64(o.marks) {
			return nil, fmt.Errorf("open cell: %d live marks after Open, want %d", live, o.marks)
		}
	}
	progress("%-40s load %v (LoadMarks, sync off), close %v, file %d MiB, open %v",
		fmt.Sprintf("oncekv open %d marks in %d window(s)", o.marks, o.windows), o.load.Round(time.Millisecond),
		o.close.Round(time.Microsecond), o.fileBytes>>20, roundAll(o.opens))
	return o, nil
}
