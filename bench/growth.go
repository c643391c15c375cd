package main

import (
	"errors"
	"fmt"
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

// growthStore is one store of the growth curve, loaded to one size.
type growthStore struct {
	pt    growthPoint
	dir   string
	clock *spreadClock
	s     store
	runs  []run
}

func (g *growthStore) config(b *bench, sync bool) storeConfig {
	sc := b.storeConfig(g.dir, sync)
	sc.now = g.clock.now
	return sc
}

// growthCurve loads one oncekv store per size of cfg.growth (in batches,
// sync off), then measures them side by side: unique-key throughput with
// the runs taken in turns across the sizes (as the cells take theirs
// across peers), so that the ratio of the largest to the smallest compares
// neighbours in time; with it what a durable commit writes, the shape of
// the B-tree, and the time Open takes.
func (b *bench) growthCurve() ([]growthPoint, error) {
	p := findPeer("oncekv")
	var gs []*growthStore
	defer func() {
		for _, g := range gs {
			if g.s != nil {
				_ = g.s.close()
			}
			os.RemoveAll(g.dir)
		}
	}()
	for _, size := range b.cfg.growth {
		dir, err := os.MkdirTemp(b.cfg.tmp, "oncekv-bench-growth-")
		if err != nil {
			return nil, err
		}
		g := &growthStore{pt: growthPoint{marks: size}, dir: dir, clock: newSpreadClock(b.cfg.span, b.cfg.growthWindows, size)}
		gs = append(gs, g)
		if err := b.loadGrowth(p, g); err != nil {
			return nil, err
		}
	}
	for _, sync := range []bool{false, true} {
		c := cell{peer: p.name, kind: kindUnique, sync: sync, clients: 1, batch: 1}
		for _, g := range gs {
			t0 := time.Now()
			s, err := p.open(g.config(b, sync))
			if err != nil {
				return nil, err
			}
			if !sync {
				g.pt.open = time.Since(t0)
			}
			g.s, g.runs = s, nil
		}
		for i := 0; i <= b.cfg.runs; i++ {
			n := b.opsPerRun(c)
			if i == 0 {
				n = max(n/4, 1) // warm-up
			}
			for _, g := range gs {
				reqs, want := b.workload(c, i, n, nil)
				for j := range reqs {
					reqs[j].key = "g" + syncName(sync) + reqs[j].key
				}
				r, err := b.execute(g.s, c, reqs, want)
				if err != nil {
					return nil, fmt.Errorf("growth %d marks: %w", g.pt.marks, err)
				}
				if i > 0 {
					g.runs = append(g.runs, r)
				}
			}
		}
		for _, g := range gs {
			err := g.s.close()
			g.s = nil
			if err != nil {
				return nil, err
			}
			res := summarize(c, g.runs)
			if sync {
				g.pt.durable, g.pt.durableCell = res.opsPerSec, res
			} else {
				g.pt.opsPerSec = res.opsPerSec
			}
		}
	}
	var points []growthPoint
	for _, g := range gs {
		pt := g.pt
		progress("%-40s %10.0f ops/s sync-off  %6.0f ops/s durable  open %v  durable: %.1f pages/commit, %.2f ms/commit, freelist %d B; newest window %d marks, depth %d; effects depth %d; root bucket %d pages",
			"oncekv growth "+strconv.Itoa(pt.marks)+" marks", pt.opsPerSec, pt.durable, pt.open.Round(time.Microsecond),
			pt.durableCell.pagesPerCommit, pt.durableCell.commitMillis, pt.durableCell.freelist, pt.tree.newestKeys, pt.tree.newestDepth, pt.tree.effectsDepth, pt.tree.rootPages)
		points = append(points, pt)
	}
	return points, nil
}

// loadGrowth fills g's store to its size, each chunk inside one window and
// below 100k requests, closes it, and reads the shape of its B-tree; the
// measured runs then write into the last window.
func (b *bench) loadGrowth(p *peer, g *growthStore) error {
	s, err := p.open(g.config(b, false))
	if err != nil {
		return err
	}
	t0 := time.Now()
	for loaded := 0; loaded < g.pt.marks; {
		w := g.clock.window(loaded)
		n := 1
		for n < min(g.pt.marks-loaded, 100_000) && g.clock.window(loaded+n) == w {
			n++
		}
		g.clock.at.Store(int64(w))
		if err := load(s, requests("grow"+strconv.Itoa(loaded), n, b.cfg), b.cfg); err != nil {
			return errors.Join(err, s.close())
		}
		loaded += n
	}
	if err := s.close(); err != nil {
		return err
	}
	g.clock.at.Store(int64(g.clock.window(g.pt.marks)))
	progress("%-40s loaded in %v", "oncekv growth "+strconv.Itoa(g.pt.marks)+" marks", time.Since(t0).Round(time.Millisecond))
	g.pt.tree, err = probeTree(filepath.Join(g.dir, "oncekv.db"))
	return err
}
