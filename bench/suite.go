package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"
	"time"
)

// suite is everything one run of the harness measured.
type suite struct {
	cfg     *config
	machine []string // "name: value" lines
	results []result
	sizes   map[string]float64 // peer -> bytes on disk per mark
	growth  []growthPoint
	open    *openResult  // nil unless -open-marks (or -full)
	fence   *fenceResult // nil with -fence-keys 0
	expiry  []pgExpireResult
	notes   map[string]string
	skipped []string // peers left out, with why
	started time.Time
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func runSuite(cfg config) error {
	dev, err := device(cfg.tmp)
	if err != nil {
		progress("no flush counts: %v", err)
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	b := &bench{cfg: &cfg, dev: dev}
	st := &suite{cfg: &cfg, sizes: map[string]float64{}, started: time.Now()}
	if st.notes, err = readNotes(cfg.notes); err != nil {
		return err
	}
	st.machine = describeMachine(&cfg, dev)
	var ps []*peer
	for i := range allPeers {
		p := &allPeers[i]
		switch {
		case !cfg.wanted(p.name):
		case isPG(p.name) && cfg.pgDSN == "":
			st.skipped = append(st.skipped, p.name+": no DSN (run .ci/postgres.sh, then -pg-dsn)")
		default:
			ps = append(ps, p)
		}
	}
	if err := b.runCells(ps, st); err != nil {
		return err
	}
	for _, p := range ps {
		if p.name == "disk" {
			continue
		}
		size, err := b.bytesPerMark(p)
		if err != nil {
			return err
		}
		progress("%-40s %10.0f bytes on disk per mark", p.name+" size", size)
		st.sizes[p.name] = size
	}
	if cfg.pgDSN != "" && len(cfg.pgExpireMarks) > 0 && (cfg.wanted("oncekv-pg") || cfg.wanted("postgres")) {
		if st.expiry, err = b.pgExpireCell(); err != nil {
			return err
		}
	}
	if cfg.wanted("oncekv") {
		if st.growth, err = b.growthCurve(); err != nil {
			return err
		}
		if cfg.fenceKeys > 0 {
			if st.fence, err = b.fenceCell(); err != nil {
				return err
			}
		}
		if cfg.openMarks > 0 {
			if st.open, err = b.openCell(); err != nil {
				return err
			}
		}
	}
	progress("done in %v", time.Since(st.started).Round(time.Second))
	if !testing.Testing() {
		fmt.Print(st.markdown())
	}
	if cfg.out == "" {
		return nil
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.out, "results.md"), []byte(st.markdown()), 0o644); err != nil {
		return err
	}
	if err := st.writeCSV(filepath.Join(cfg.out, "runs.csv")); err != nil {
		return err
	}
	return st.plots(cfg.out)
}

// growthWindows says how the growth curve's marks were laid out.
func (st *suite) growthWindows() string {
	if w := st.cfg.growthWindows; w > 1 {
		return fmt.Sprintf("marks spread over %d windows of %v", w, st.cfg.span)
	}
	return "every mark in the one window new marks land in"
}

// shapes lists the cells measured, each on every peer it applies to.
func (b *bench) shapes() []cell {
	var cs []cell
	n := b.cfg.clients
	for _, sync := range []bool{true, false} {
		if b.cfg.sync == "both" || sync == (b.cfg.sync == "on") {
			cs = append(cs, cell{"", kindUnique, sync, 1, 1}, cell{"", kindUnique, sync, n, 1})
		}
	}
	cs = append(cs, cell{"", kindBatch, true, 1, b.cfg.batch}, cell{"", kindDup, true, 1, 1}, cell{"", kindDup, true, n, 1})
	if b.cfg.dupRatio > 0 {
		cs = append(cs, cell{"", kindMixed, true, 1, 1})
	}
	return cs
}

// appliesTo reports whether p can run cells of shape c: a batch needs a
// batch form, duplicates need dedup.
func (b *bench) appliesTo(p *peer, c cell) (bool, error) {
	switch c.kind {
	case kindBatch:
		o, err := b.open(p, c)
		if err != nil {
			return false, err
		}
		_, ok := o.s.(batcher)
		return ok, o.close()
	case kindDup, kindMixed:
		return p.dedup, nil
	}
	return true, nil
}

func (b *bench) runCells(ps []*peer, st *suite) error {
	for _, c := range b.shapes() {
		var these []*peer
		for _, p := range ps {
			ok, err := b.appliesTo(p, c)
			if err != nil {
				return err
			}
			if ok {
				these = append(these, p)
			}
		}
		t0 := time.Now()
		rs, err := b.measure(these, c)
		if err != nil {
			return err
		}
		for _, r := range rs {
			progress("%-40s %10.0f ops/s  %.2f flushes/op  %6.0f B/op written by us  p50 %v p99 %v",
				r.cell, r.opsPerSec, r.flushesPerOp, r.appBytes, r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond))
		}
		progress("(%v)", time.Since(t0).Round(100*time.Millisecond))
		st.results = append(st.results, rs...)
	}
	return nil
}

// bytesPerMark loads cfg.sizeKeys requests with sync off, closes the store
// so that it settles (SQLite checkpoints its WAL, Badger flushes its
// memtable), and divides the space it takes by the count. The effect's
// 64-byte row is included for every peer alike.
func (b *bench) bytesPerMark(p *peer) (float64, error) {
	var n int64
	dir, err := os.MkdirTemp(b.cfg.tmp, "oncekv-bench-size-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	s, err := p.open(b.storeConfig(dir, false))
	if err != nil {
		return 0, err
	}
	err = load(s, requests("size", b.cfg.sizeKeys, b.cfg), b.cfg)
	if sz, ok := s.(sizer); ok && err == nil {
		n, err = sz.diskBytes()
	}
	if cerr := s.close(); err == nil {
		err = cerr
	}
	if _, ok := s.(sizer); !ok && err == nil {
		n, err = dirBytes(dir)
	}
	return float64(n) / float64(b.cfg.sizeKeys), err
}
