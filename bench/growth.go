package main

import (
	"os"
	"strconv"
	"time"
)

// growthPoint is oncekv at one number of live marks.
type growthPoint struct {
	marks     int
	opsPerSec float64 // unique keys, sync off, one client: the B-tree's cost, not the disk's
	durable   float64 // unique keys, durable, one client
	open      time.Duration
}

// growthCurve loads one oncekv store up to each size of cfg.growth (in
// batches, sync off), and at each measures unique-key throughput and the
// time Open takes.
func (b *bench) growthCurve() ([]growthPoint, error) {
	p := findPeer("oncekv")
	dir, err := os.MkdirTemp(b.cfg.tmp, "oncekv-bench-growth-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var points []growthPoint
	loaded := 0
	for _, size := range b.cfg.growth {
		s, err := p.open(b.storeConfig(dir, false))
		if err != nil {
			return nil, err
		}
		for loaded < size {
			n := min(size-loaded, 100_000)
			if err := load(s, requests("grow"+strconv.Itoa(loaded), n, b.cfg), b.cfg); err != nil {
				return nil, err
			}
			loaded += n
		}
		if err := s.close(); err != nil {
			return nil, err
		}
		pt := growthPoint{marks: size}
		for _, sync := range []bool{false, true} {
			t0 := time.Now()
			s, err := p.open(b.storeConfig(dir, sync))
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
			if sync {
				pt.durable = summarize(c, runs).opsPerSec
			} else {
				pt.opsPerSec = summarize(c, runs).opsPerSec
			}
		}
		progress("%-40s %10.0f ops/s sync-off  %6.0f ops/s durable  open %v",
			"oncekv growth "+strconv.Itoa(size)+" marks", pt.opsPerSec, pt.durable, pt.open.Round(time.Microsecond))
		points = append(points, pt)
	}
	return points, nil
}
