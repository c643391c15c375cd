package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"
)

// Workload kinds of a cell.
const (
	kindUnique = "unique" // every request a new key
	kindDup    = "dup"    // every request a redelivery of a stored key
	kindBatch  = "batch"  // new keys, cfg.batch per call
	kindMixed  = "mixed"  // new keys with a share of redeliveries (-dup)
)

// cell is one measured figure's setting; its value is the median of runs.
type cell struct {
	peer    string
	kind    string
	sync    bool
	clients int
	batch   int
}

func (c cell) String() string {
	s := fmt.Sprintf("%s %s %s c%d", c.peer, c.kind, syncName(c.sync), c.clients)
	if c.batch > 1 {
		s += fmt.Sprintf(" b%d", c.batch)
	}
	return s
}

func syncName(on bool) string {
	if on {
		return "durable"
	}
	return "sync-off"
}

// run is one measured run of a cell.
type run struct {
	cell
	i        int
	ops      int
	elapsed  time.Duration
	disk     diskCounters
	proc     procIO
	commit   commitCounts  // zero for a peer that is not a commitCounter
	p50, p99 time.Duration // per call (a batch is one call)
}

func (r run) opsPerSec() float64 { return float64(r.ops) / r.elapsed.Seconds() }
func (r run) flushesPerOp() float64 {
	return float64(r.disk.flushes) / float64(r.ops)
}
func (r run) bytesPerOp() float64    { return float64(r.disk.sectorsWrite*512) / float64(r.ops) }
func (r run) appBytesPerOp() float64 { return float64(r.proc.wchar) / float64(r.ops) }

// The figures per commit, for a commitCounter; 0 when it committed nothing.
func (r run) requestsPerCommit() float64 { return perCommit(float64(r.commit.marks), r.commit.markTxs) }
func (r run) commitMillis() float64 {
	return perCommit(float64(r.commit.took)/float64(time.Millisecond), r.commit.commits)
}
func (r run) pagesPerCommit() float64 {
	return perCommit(float64(r.proc.wchar)/float64(max(r.commit.pageSize, 1)), r.commit.commits)
}

func perCommit(v float64, commits uint64) float64 {
	if commits == 0 {
		return 0
	}
	return v / float64(commits)
}

// result is a cell's median over its runs, each figure taken separately.
type result struct {
	cell
	runs         []run
	opsPerSec    float64
	flushesPerOp float64
	bytesPerOp   float64
	appBytes     float64 // bytes this process wrote per op
	p50, p99     time.Duration
	// For a commitCounter (oncekv): marks per commit, mean commit time,
	// and pages this process wrote per commit (its bytes written over the
	// page size: data pages, freelist and meta).
	requestsPerCommit, commitMillis, pagesPerCommit float64
	freelist                                        int // bytes, after the last run
}

func median[T any](runs []run, f func(run) T, less func(a, b T) int) T {
	v := make([]T, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	slices.SortFunc(v, less)
	return v[len(v)/2]
}

func summarize(c cell, runs []run) result {
	fl := func(a, b float64) int {
		switch {
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	}
	dl := func(a, b time.Duration) int { return int(a - b) }
	return result{
		cell:         c,
		runs:         runs,
		opsPerSec:    median(runs, run.opsPerSec, fl),
		flushesPerOp: median(runs, run.flushesPerOp, fl),
		bytesPerOp:   median(runs, run.bytesPerOp, fl),
		appBytes:     median(runs, run.appBytesPerOp, fl),
		p50:          median(runs, func(r run) time.Duration { return r.p50 }, dl),
		p99:          median(runs, func(r run) time.Duration { return r.p99 }, dl),

		requestsPerCommit: median(runs, run.requestsPerCommit, fl),
		commitMillis:      median(runs, run.commitMillis, fl),
		pagesPerCommit:    median(runs, run.pagesPerCommit, fl),
		freelist:          runs[len(runs)-1].commit.freelist,
	}
}

// requests makes n requests with keys prefix-0 ... prefix-(n-1), each with
// a payload and a response of the configured sizes.
func requests(prefix string, n int, cfg *config) []request {
	rs := make([]request, n)
	for i := range rs {
		key := fmt.Sprintf("%s-%09d", prefix, i)
		rs[i] = request{handler: "bench", key: key, payload: fill(key, cfg.payload), response: fill("r"+key, cfg.response)}
	}
	return rs
}

// fill is n bytes repeating seed: deterministic, and different per key.
func fill(seed string, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed[i%len(seed)]
	}
	return b
}

// retention is the dedup window every store is opened with.
const retention = 7 * 24 * time.Hour

// bench holds what every cell needs.
type bench struct {
	cfg *config
	dev string // block device of cfg.tmp; empty when there is none
}

func (b *bench) storeConfig(dir string, sync bool) storeConfig {
	return storeConfig{
		dir:       dir,
		sync:      sync,
		bloom:     b.cfg.bloom,
		span:      b.cfg.span,
		retention: retention,
		pgDSN:     b.cfg.pgDSN,
	}
}

// opsPerRun is how many requests one run of c applies.
func (b *bench) opsPerRun(c cell) int {
	switch {
	case c.kind == kindBatch:
		return max(b.cfg.batch*10, b.cfg.keys)
	case c.sync && c.kind != kindDup:
		return b.cfg.keys
	}
	return b.cfg.fastKeys
}

// opened is a fresh store of one peer in its own temp dir.
type opened struct {
	p      *peer
	c      cell
	s      store
	dir    string
	stored []request // the keys that duplicates redeliver
	runs   []run
}

func (o *opened) close() error {
	err := o.s.close()
	return errors.Join(err, os.RemoveAll(o.dir))
}

// open opens a fresh store of p for cell c.
func (b *bench) open(p *peer, c cell) (*opened, error) {
	dir, err := os.MkdirTemp(b.cfg.tmp, "oncekv-bench-")
	if err != nil {
		return nil, err
	}
	s, err := p.open(b.storeConfig(dir, c.sync))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%s: open: %w", p.name, err), os.RemoveAll(dir))
	}
	return &opened{p: p, c: c, s: s, dir: dir}, nil
}

// measure measures the cell shape c on every peer of ps, each in a fresh
// store: a warm-up run each, then cfg.runs measured runs each, taken in
// turns (run 1 of every peer, then run 2, ...) so that a burst of noise
// from the rest of the machine falls on all peers alike rather than on
// whichever was running then. Each peer's cell is the median of its runs.
func (b *bench) measure(ps []*peer, c cell) (res []result, err error) {
	n := b.opsPerRun(c)
	var all []*opened
	defer func() {
		for _, o := range all {
			err = errors.Join(err, o.close())
		}
	}()
	for _, p := range ps {
		pc := c
		pc.peer = p.name
		o, err := b.open(p, pc)
		if err != nil {
			return nil, err
		}
		all = append(all, o)
		if c.kind == kindDup || c.kind == kindMixed {
			o.stored = requests("stored", n, b.cfg)
			if err := load(o.s, o.stored, b.cfg); err != nil {
				return nil, fmt.Errorf("%s: load: %w", pc, err)
			}
		}
	}
	for i := 0; i <= b.cfg.runs; i++ {
		m := n
		if i == 0 {
			m = max(n/4, 1) // warm-up
		}
		for _, o := range all {
			reqs, wantDup := b.workload(o.c, i, m, o.stored)
			r, err := b.execute(o.s, o.c, reqs, wantDup)
			if err != nil {
				return nil, fmt.Errorf("%s run %d: %w", o.c, i, err)
			}
			r.i = i
			if i > 0 {
				o.runs = append(o.runs, r)
			}
		}
	}
	for _, o := range all {
		res = append(res, summarize(o.c, o.runs))
	}
	return res, nil
}

// workload returns run i's requests, and for each whether it must come
// back a duplicate.
func (b *bench) workload(c cell, i, n int, stored []request) ([]request, []bool) {
	rng := rand.New(rand.NewPCG(uint64(i), 42))
	wantDup := make([]bool, n)
	switch c.kind {
	case kindDup:
		reqs := make([]request, n)
		for j := range reqs {
			reqs[j] = stored[rng.IntN(len(stored))]
			wantDup[j] = true
		}
		return reqs, wantDup
	case kindMixed:
		reqs := requests(fmt.Sprintf("run%d", i), n, b.cfg)
		for j := range reqs {
			if rng.Float64() < b.cfg.dupRatio {
				reqs[j], wantDup[j] = stored[rng.IntN(len(stored))], true
			}
		}
		return reqs, wantDup
	}
	return requests(fmt.Sprintf("run%d", i), n, b.cfg), wantDup
}

// execute applies reqs from c.clients goroutines, c.batch per call, and
// checks every outcome against the protocol.
func (b *bench) execute(s store, c cell, reqs []request, wantDup []bool) (run, error) {
	bs, _ := s.(batcher)
	if c.batch > 1 && bs == nil {
		return run{}, fmt.Errorf("%s has no batch form", c.peer)
	}
	ctx := context.Background()
	lat := make([][]time.Duration, c.clients)
	errs := make([]error, c.clients)
	check := func(j int, o outcome) error {
		if o.err != nil {
			return fmt.Errorf("request %s: %w", reqs[j].key, o.err)
		}
		if want := wantDup[j] && findPeer(c.peer).dedup; o.duplicate != want {
			return fmt.Errorf("request %s: duplicate = %v, want %v", reqs[j].key, o.duplicate, want)
		}
		return nil
	}
	cc, _ := s.(commitCounter)
	var beforeCommit commitCounts
	if cc != nil {
		beforeCommit = cc.commitCounts()
	}
	before, beforeIO := readDisk(b.dev), readProcIO()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range c.clients {
		wg.Go(func() {
			step := max(c.batch, 1)
			// Client w takes calls w, w+clients, ...: each call's requests are
			// contiguous, so a batch is a consumer's poll.
			for lo := w * step; lo < len(reqs); lo += c.clients * step {
				hi := min(lo+step, len(reqs))
				t0 := time.Now()
				var err error
				if bs != nil && c.batch > 1 {
					var out []outcome
					if out, err = bs.applyBatch(ctx, reqs[lo:hi]); err == nil {
						for k, o := range out {
							if err = check(lo+k, o); err != nil {
								break
							}
						}
					}
				} else {
					err = check(lo, s.apply(ctx, &reqs[lo]))
				}
				lat[w] = append(lat[w], time.Since(t0))
				if err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	disk, proc := readDisk(b.dev).sub(before), readProcIO().sub(beforeIO)
	var commit commitCounts
	if cc != nil {
		commit = cc.commitCounts().sub(beforeCommit)
	}
	for _, err := range errs {
		if err != nil {
			return run{}, err
		}
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	return run{cell: c, ops: len(reqs), elapsed: elapsed, disk: disk, proc: proc, commit: commit,
		p50: all[len(all)/2], p99: all[len(all)*99/100]}, nil
}

// load stores reqs as fast as the peer can: in batches when it has a batch
// form, else from several clients.
func load(s store, reqs []request, cfg *config) error {
	if bs, ok := s.(batcher); ok {
		for lo := 0; lo < len(reqs); lo += cfg.batch {
			out, err := bs.applyBatch(context.Background(), reqs[lo:min(lo+cfg.batch, len(reqs))])
			if err != nil {
				return err
			}
			for _, o := range out {
				if o.err != nil {
					return o.err
				}
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for w := range cfg.clients {
		wg.Go(func() {
			for j := w; j < len(reqs); j += cfg.clients {
				if o := s.apply(context.Background(), &reqs[j]); o.err != nil {
					mu.Lock()
					first = o.err
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}
