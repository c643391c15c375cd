package main

import (
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"
)

// growthPoint is oncekv at one number of live marks.
type growthPoint struct {
	marks     int
	opsPerSec float64 // unique keys, sync off, one client: the B-tree's cost, not the disk's
	durable   float64 // unique keys, durable, one client
	open      time.Duration
	// What a durable commit cost at this size, and why (issue 11: durable
	// cost grows with the tree).
	durableCell result
	tree        treeShape // the file after the load, before the measured runs
}

// spreadClock is the growth curve's clock: it puts mark i of the largest
// size into window i*windows/largest, the windows counted from one that
// began windows+1 spans ago, so that all are live (expiry is off anyway)
// and each holds its share. With one window every mark lands in it: the
// worst case for the window new marks go into, and the curve before issue
// 11. The clock stands still inside a window: nothing in the cells reads
// a duration off it.
type spreadClock struct {
	start   time.Time
	span    time.Duration
	windows int
	largest int
	at      atomic.Int64 // the window it is in
}

func newSpreadClock(span time.Duration, windows, largest int) *spreadClock {
	return &spreadClock{start: time.Now().Truncate(span).Add(-time.Duration(windows+1) * span),
		span: span, windows: windows, largest: largest}
}

func (c *spreadClock) now() time.Time {
	return c.start.Add(time.Duration(c.at.Load())*c.span + c.span/2)
}

// window is the window mark i goes into; the marks of the measured runs
// at size n go where mark n would, into the last window at the end.
func (c *spreadClock) window(i int) int {
	return min(int(int64(i)*int64(c.windows)/int64(c.largest)), c.windows-1)
}

// growthCurve loads one oncekv store up to each size of cfg.growth (in
// batches, sync off), and at each measures unique-key throughput, what a
// durable commit writes, the shape of the B-tree, and the time Open takes.
func (b *bench) growthCurve() ([]growthPoint, error) {
	p := findPeer("oncekv")
	dir, err := os.MkdirTemp(b.cfg.tmp, "oncekv-bench-growth-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	clock := newSpreadClock(b.cfg.span, b.cfg.growthWindows, b.cfg.growth[len(b.cfg.growth)-1])
	config := func(sync bool) storeConfig {
		sc := b.storeConfig(dir, sync)
		sc.now = clock.now
		return sc
	}
	var points []growthPoint
	loaded := 0
	for _, size := range b.cfg.growth {
		s, err := p.open(config(false))
		if err != nil {
			return nil, err
		}
		for loaded < size {
			// A chunk stays inside one window, and below 100k requests.
			w := clock.window(loaded)
			n := 1
			for n < min(size-loaded, 100_000) && clock.window(loaded+n) == w {
				n++
			}
			clock.at.Store(int64(w))
			if err := load(s, requests("grow"+strconv.Itoa(loaded), n, b.cfg), b.cfg); err != nil {
				return nil, err
			}
			loaded += n
		}
		if err := s.close(); err != nil {
			return nil, err
		}
		pt := growthPoint{marks: size}
		if pt.tree, err = probeTree(filepath.Join(dir, "oncekv.db")); err != nil {
			return nil, err
		}
		clock.at.Store(int64(clock.window(size)))
		for _, sync := range []bool{false, true} {
			t0 := time.Now()
			s, err := p.open(config(sync))
			if err != nil {
				return nil, err
			}
			if !sync {
				pt.open = time.Since(t0)
			}
			c := cell{peer: p.name, kind: kindUnique, sync: sync, clients: 1, batch: 1}
			var runs []run
			for i := 1; i <= b.cfg.runs; i++ {
				reqs, want := b.workload(c, i, b.opsPerRun(c), nil)
				for j := range reqs {
					reqs[j].key = "g" + strconv.Itoa(size) + syncName(sync) + reqs[j].key
				}
				r, err := b.execute(s, c, reqs, want)
				if err != nil {
					return nil, err
				}
				runs = append(runs, r)
			}
			if err := s.close(); err != nil {
				return nil, err
			}
			res := summarize(c, runs)
			if sync {
				pt.durable, pt.durableCell = res.opsPerSec, res
			} else {
				pt.opsPerSec = res.opsPerSec
			}
		}
		progress("%-40s %10.0f ops/s sync-off  %6.0f ops/s durable  open %v  durable: %.1f pages/commit, %.2f ms/commit, freelist %d B; newest window %d marks, depth %d; effects depth %d",
			"oncekv growth "+strconv.Itoa(size)+" marks", pt.opsPerSec, pt.durable, pt.open.Round(time.Microsecond),
			pt.durableCell.pagesPerCommit, pt.durableCell.commitMillis, pt.durableCell.freelist, pt.tree.newestKeys, pt.tree.newestDepth, pt.tree.effectsDepth)
		points = append(points, pt)
	}
	return points, nil
}
